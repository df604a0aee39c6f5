"""Model output in a real browser (chromium through playwright, against manage.py serve): a
generated ``<script>alert()</script>`` / ``<img onerror=alert()>`` in the run page (rendered rows
and a row arriving over the websocket), the trajectory page and the review queue fires no
dialog and creates no element; it is shown as text."""
from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import Group
from django.db import connection

from apps.episodes.models import Attempt, Rubric, Task
from apps.review.models import ReviewItem
from apps.runs.models import Run
from apps.runs.sink import DjangoSink
from tests.web.runs.conftest import private_redis, roles  # noqa: F401  (fixtures)
from tests.web.runs.test_live_page_browser import CHROMIUM, server  # noqa: F401  (fixture)

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")]

EVIL = '<script>alert("script")</script><img src=x onerror="alert(\'img\')">'


def _push(run_id: int) -> None:
    try:
        sink = DjangoSink(run_id)
        sink.samples(2, [{"kind": "attempt", "key": "2:0", "role": "reasoner", "step": 2,
                          "text": "live " + EVIL, "reward": 0.5}])
        sink.control()
    finally:
        connection.close()


def test_generated_markup_stays_text_in_the_browser(roles, researcher, server, monkeypatch):  # noqa: F811
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API runs an event loop here
    researcher.groups.add(Group.objects.get(name="reviewer"))
    run = Run.objects.create(method="spice", model_name="tiny", config={}, owner=researcher, total_steps=5)
    run.mark_running("w")
    task = Task.objects.create(run=run, key="1:t0", step=1, role="challenger", question="q " + EVIL, answer="a " + EVIL)
    Attempt.objects.create(run=run, task=task, key="1:t0:a0", task_key="1:t0", role="reasoner", step=1,
                           text="attempt " + EVIL, turns=[{"role": "assistant", "text": "turn " + EVIL},
                                                          {"role": "tool", "text": "tool " + EVIL}])
    rubric = Rubric.objects.create(run=run, task=task, key="1:t0:r0", task_key="1:t0", step=1, text="rubric " + EVIL)
    item = ReviewItem.objects.create(run=run, run_number=run.pk, kind="rubric", key=rubric.key, step=1, task=task,
                                     rubric=rubric, task_key=task.key, snapshot={"text": "rubric " + EVIL})
    from playwright.sync_api import sync_playwright

    dialogs, problems = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"{server}/accounts/login/?next=/runs/{run.pk}/")
        page.fill("#id_username", "rita")
        page.fill("#id_password", "pw-rita")
        page.click("button[type=submit]")
        page.wait_for_url(f"{server}/runs/{run.pk}/")
        page.wait_for_function("() => window.htmx !== undefined", timeout=30_000)
        page.wait_for_timeout(1500)  # the websocket opens
        pusher = threading.Thread(target=_push, args=(run.pk,))
        pusher.start()
        pusher.join()
        page.locator('#samples tr[data-key="attempt:2:0"]').wait_for(timeout=30_000)
        pages = [(f"/runs/{run.pk}/", ["q ", "attempt ", "live "]),
                 (f"/runs/{run.pk}/attempts/1:t0:a0/", ["turn ", "tool "]),
                 (f"/review/?item={item.pk}", ["rubric ", "q "])]
        for i, (url, shown) in enumerate(pages):
            if i:
                page.goto(server + url)
                page.wait_for_load_state("load")
            text = page.inner_text("body")
            for prefix in shown:
                if prefix + EVIL not in text:
                    problems.append(f"{url}: {prefix!r} + the markup is not shown as text")
            elements = page.evaluate("""() => document.querySelectorAll('img[src="x"]').length + [...document.scripts]
                .filter(s => s.type !== 'application/json' && s.textContent.includes('alert(')).length""")
            if elements:
                problems.append(f"{url}: the markup became {elements} element(s)")
        page.wait_for_timeout(500)
        browser.close()
    assert not dialogs, f"a dialog fired: {dialogs}"
    assert not problems, "\n".join(problems)


def test_a_chart_label_holding_a_link_is_drawn_as_text(roles, researcher, server, monkeypatch):  # noqa: F811
    """A metric role is data (an imported run's, a recipe's): Plotly reads trace names as its pseudo-HTML, so
    unescaped, <a href=...> in a role would be a link in the legend (static/js/plotly_safe.js escapes it)."""
    from apps.runs.models import Metric
    from tests.web.runs.test_live_page_browser import logged_in_page

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    run = Run.objects.create(method="spice", model_name="tiny", config={}, owner=researcher, total_steps=5)
    role = '<a href="//evil.x">x</a>'  # 24 characters: a role holds 32
    Metric.objects.bulk_create([Metric(run=run, step=s, role=role, name="reward_mean", value=s / 10) for s in (1, 2)]
                               + [Metric(run=run, step=s, role="reasoner", name="reward_mean", value=s / 5)
                                  for s in (1, 2)])
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, f"/runs/{run.pk}/")
        page.wait_for_function("() => { const c = document.getElementById('reward-chart');"
                               " return c && c.data && c.data.length >= 2 && document.querySelector('#reward-chart .legend'); }",
                               timeout=30_000)
        links = page.evaluate("() => document.querySelectorAll('#reward-chart a[href*=\"evil\"]').length")
        legend = page.evaluate("() => document.querySelector('#reward-chart .legend').textContent")
        browser.close()
    assert links == 0 and 'href="//evil.x"' in legend  # shown as the text it is
    assert not errors
