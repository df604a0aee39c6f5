"""In a real browser: a reviewer logs in, approves one item and flags another with the keyboard,
and after the run's next step boundary the run page shows the verdict event."""
import os
import shutil
import threading

import pytest
from django.db import connection

from apps.review.models import ReviewItem
from apps.runs.models import Run
from apps.runs.sink import DjangoSink
from tests.web.review.conftest import records

CHROMIUM = shutil.which("chromium")


def _in_thread(work):
    """work() in a thread of its own, as a worker would, and its result back here.

    Inside ``sync_playwright()`` an event loop runs on this thread, and Django gives each asgiref
    context a connection of its own that nothing closes: the test database would still be in use
    when the session drops it. The thread closes its connection when it is done."""
    out = {}

    def target():
        try:
            out["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test's thread
            out["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _refreshed(*items):
    for item in items:
        item.refresh_from_db()
    return items


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")
@pytest.mark.django_db(transaction=True)
def test_a_reviewer_works_the_queue_with_the_keyboard(live_server, roles, reviewer, researcher, tmp_path):
    from playwright.sync_api import sync_playwright

    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    run = Run.objects.create(method="spice", model_name="tiny", owner=researcher, total_steps=5,
                             config={"method": "spice", "review": {"tasks": 1.0, "rubrics": 0.0, "grades": 0.0}})
    run.mark_running("test")
    sink = DjangoSink(run)
    recs = records(1, n=2)
    recs[0]["question"] = "Which year? <img src=x onerror=alert(1)>"
    sink.samples(1, recs)
    sink.control()
    first, second = ReviewItem.objects.filter(run_number=run.pk).order_by("id")

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page()
        dialogs = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"{live_server.url}/review/?run={run.pk}")
        page.fill("#id_username", "vic")
        page.fill("#id_password", "pw-vic")
        page.click("button[type=submit]")
        page.wait_for_selector("body[data-shortcuts=on]")  # review.js has bound its keys
        assert page.get_attribute("#review-item", "data-item") == str(first.pk)
        assert "<img src=x onerror=alert(1)>" in page.inner_text("#task-question")  # shown as text, not HTML
        page.screenshot(path=str(tmp_path / "item.png"), full_page=True)

        with page.expect_navigation():
            page.keyboard.press("a")
        assert page.get_attribute("#review-item", "data-item") == str(second.pk)
        with page.expect_navigation():
            page.keyboard.press("f")  # a flag without a reason is refused, and the page says why
        assert page.get_attribute("#review-item", "data-item") == str(second.pk)
        assert "a flag needs a reason" in page.inner_text("body")
        page.fill("#reason", "the gold answer is not in the document")
        page.keyboard.press("Escape")  # leave the text box
        page.keyboard.press("Escape")  # close the message; keys are shortcuts again
        with page.expect_navigation():
            page.keyboard.press("f")
        page.wait_for_selector("#review-empty")  # nothing pending is left for this run
        page.screenshot(path=str(tmp_path / "queue.png"))

        first, second = _in_thread(lambda: _refreshed(first, second))
        assert (first.status, first.reviewer_name) == ("approved", "vic")
        assert (second.status, second.reason) == ("flagged", "the gold answer is not in the document")

        verdicts = _in_thread(lambda: sink.control().verdicts)  # the run's next step boundary
        assert [(v.key, v.verdict) for v in verdicts] == [("1:t0", "approve"), ("1:t1", "flag")]
        page.goto(f"{live_server.url}/runs/{run.pk}/")
        events = page.inner_text("#run-events")
        assert "review: task 1:t1 flagged by vic (the gold answer is not in the document)" in events
        assert "review: task 1:t0 approved by vic" in events
        assert "received" in page.inner_text("#review-verdicts")
        page.screenshot(path=str(tmp_path / "run.png"), full_page=True)
        assert dialogs == []  # the untrusted text never ran as script
        browser.close()


def _login(page, url):
    page.goto(url)
    page.fill("#id_username", "vic")
    page.fill("#id_password", "pw-vic")
    page.click("button[type=submit]")
    page.wait_for_selector("body[data-shortcuts=on]")  # review.js has bound its keys


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")
@pytest.mark.django_db(transaction=True)
def test_a_reason_typed_after_a_refused_flag_never_approves(live_server, roles, reviewer, researcher, tmp_path):
    """The bug a researcher hit: f with no reason is refused, the reason then typed ("bad answer") fired
    the a of "bad" as Approve. Now the cursor lands in the reason box and nothing typed is a shortcut;
    while the error message is open no key is one either."""
    from playwright.sync_api import sync_playwright

    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    run = Run.objects.create(method="spice", model_name="tiny", owner=researcher, total_steps=5,
                             config={"method": "spice", "review": {"tasks": 1.0, "rubrics": 0.0, "grades": 0.0}})
    run.mark_running("test")
    sink = DjangoSink(run)
    sink.samples(1, records(1, n=2))
    sink.control()  # the flush that queues them
    first = ReviewItem.objects.filter(run_number=run.pk).order_by("id").first()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page()
        _login(page, f"{live_server.url}/review/?run={run.pk}")
        api = f"{live_server.url}/api/v1/review/items/{first.pk}/"

        def status():
            return page.request.get(api).json()

        with page.expect_navigation():
            page.keyboard.press("f")
        assert "a flag needs a reason" in page.inner_text(".messages")
        assert page.evaluate("document.activeElement.id") == "reason"  # the cursor is where the reason goes
        page.keyboard.type("bad answer, and the gold is wrong")  # a, n, e, f, j: all typed, none a shortcut
        page.wait_for_timeout(300)
        assert page.get_attribute("#review-item", "data-item") == str(first.pk)
        assert page.input_value("#reason") == "bad answer, and the gold is wrong"
        assert status()["status"] == "pending"

        page.keyboard.press("Escape")  # out of the text box, but the error message is still open
        for key in "afn":
            page.keyboard.press(key)
        page.wait_for_timeout(300)
        assert status()["status"] == "pending" and page.get_attribute("#review-item", "data-item") == str(first.pk)
        page.screenshot(path=str(tmp_path / "refused.png"), full_page=True)

        page.focus("#reason")
        with page.expect_navigation():
            page.keyboard.press("Control+Enter")  # in the reason box: flag with it
        got = status()
        assert (got["status"], got["reason"]) == ("flagged", "bad answer, and the gold is wrong")
        browser.close()


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")
@pytest.mark.django_db(transaction=True)
def test_e_edits_a_task_and_bulk_flags_a_selection(live_server, roles, reviewer, researcher, tmp_path):
    from playwright.sync_api import sync_playwright

    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    run = Run.objects.create(method="spice", model_name="tiny", owner=researcher, total_steps=5,
                             config={"method": "spice", "review": {"tasks": 1.0, "rubrics": 0.0, "grades": 0.0}})
    run.mark_running("test")
    sink = DjangoSink(run)
    sink.samples(1, records(1, n=3))
    sink.control()
    first, second, third = ReviewItem.objects.filter(run_number=run.pk).order_by("id")

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page()
        _login(page, f"{live_server.url}/review/?run={run.pk}")
        page.keyboard.press("e")
        assert page.evaluate("document.activeElement.id") == "edit-question"
        page.fill("#edit-question", "In which year did Apollo 11 land on the Moon?")
        page.fill("#edit-answer", "1969")
        page.focus("#edit-answer")
        with page.expect_navigation():
            page.keyboard.press("Control+Enter")
        edited = page.request.get(f"{live_server.url}/api/v1/review/items/{first.pk}/").json()
        assert edited["status"] == "approved"
        assert edited["edit"] == {"question": "In which year did Apollo 11 land on the Moon?", "answer": "1969"}

        page.click("#bulk summary")
        page.check(f".bulk-id[value='{second.pk}']")
        page.check(f".bulk-id[value='{third.pk}']")
        with page.expect_navigation():
            page.click("#bulk-flag")  # no reason: refused, nothing saved, the cursor in the bulk reason
        assert "a flag needs a reason" in page.inner_text(".messages")
        assert page.evaluate("document.activeElement.id") == "bulk-reason"
        page.check(f".bulk-id[value='{second.pk}']")
        page.check(f".bulk-id[value='{third.pk}']")
        page.fill("#bulk-reason", "off topic")
        with page.expect_navigation():
            page.click("#bulk-flag")
        page.wait_for_selector("#review-empty")
        for item in (second, third):
            got = page.request.get(f"{live_server.url}/api/v1/review/items/{item.pk}/").json()
            assert (got["status"], got["reason"]) == ("flagged", "off topic")
        browser.close()
