"""In a real browser: a researcher names a run, tags it and notes what it showed on its page; the title,
the runs list (and its tag filter) then say so."""
import os
import shutil

import pytest

from apps.runs.models import Run

CHROMIUM = shutil.which("chromium")


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")
@pytest.mark.django_db(transaction=True)
def test_a_researcher_names_and_notes_a_run_in_the_browser(live_server, researcher, tmp_path):
    from importlib import import_module

    from django.apps import apps
    from django.contrib.auth.models import Group
    from playwright.sync_api import sync_playwright

    import_module("apps.accounts.migrations.0001_roles").create_roles(apps, None)  # live_server flushed them
    researcher.groups.add(*Group.objects.filter(name="researcher"))
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    run = Run.objects.create(method="grpo", model_name="qwen2.5-0.5b", config={"method": "grpo"}, owner=researcher,
                             status="finished", total_steps=10, current_step=10)
    other = Run.objects.create(method="grpo", model_name="qwen2.5-0.5b", config={"method": "grpo"}, owner=researcher,
                               status="finished", total_steps=10, current_step=10)
    timed = Run.objects.create(method="grpo", model_name="qwen2.5-0.5b", owner=researcher, status="finished",
                               config={"method": "grpo", "train": {"time_limit_minutes": 10}}, total_steps=400,
                               current_step=37)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page()
        page.goto(f"{live_server.url}/runs/{run.pk}/")
        page.fill("#id_username", "rita")
        page.fill("#id_password", "pw-rita")
        page.click("button[type=submit]")
        page.wait_for_selector("#run-describe")
        page.click("#run-describe summary")
        page.fill("#run-name", "GRPO lr 1e-6 baseline")
        page.fill("#run-tags", "baseline, gsm8k")
        page.fill("#run-notes-field", "GRPO on GSM8K train; +9.7 points paired on the held-out half.")
        with page.expect_navigation():
            page.click("#run-describe-save")
        assert page.title().startswith(f"Run {run.pk} · GRPO lr 1e-6 baseline")
        assert "GRPO lr 1e-6 baseline" in page.inner_text("#run-title")
        assert "+9.7 points paired" in page.inner_text("#run-notes")
        page.goto(f"{live_server.url}/runs/")
        assert "GRPO lr 1e-6 baseline" in page.inner_text("#runs")
        # a status pill stays one line high in the runs table (the time-limit one wrapped into a tall blob)
        heights = page.evaluate("""() => [...document.querySelectorAll('#runs tbody td .badge')]
            .filter(b => !b.classList.contains('tag')).map(b => [b.textContent.trim(), b.offsetHeight])""")
        assert {t for t, _ in heights} >= {"time limit", "finished"} and len({h for _, h in heights}) == 1, heights
        page.click("#runs a.badge.tag >> text=baseline")
        rows = page.locator("#runs tbody tr")
        assert rows.count() == 1 and "GRPO lr 1e-6 baseline" in rows.first.inner_text()
        assert f"/runs/{other.pk}/" not in page.content()
        page.screenshot(path=str(tmp_path / "runs.png"), full_page=True)
        browser.close()


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")
@pytest.mark.django_db(transaction=True)
def test_the_runs_list_is_sorted_by_model_and_by_status_from_its_sort_control(live_server, researcher):
    from importlib import import_module

    from django.apps import apps
    from django.contrib.auth.models import Group
    from playwright.sync_api import sync_playwright

    import_module("apps.accounts.migrations.0001_roles").create_roles(apps, None)  # live_server flushed them
    researcher.groups.add(*Group.objects.filter(name="researcher"))
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

    def make(model, status, i):
        return Run.objects.create(method="grpo", model_name=model, config={"method": "grpo", "seed": i},
                                  owner=researcher, status=status, total_steps=10, current_step=1)

    zeta = make("/tmp/models/zeta-model/", "failed", 1)
    alpha = make("alpha-model", "finished", 2)
    mid = make("mid-model", "queued", 3)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page()
        page.goto(f"{live_server.url}/runs/")
        page.fill("#id_username", "rita")
        page.fill("#id_password", "pw-rita")
        page.click("button[type=submit]")
        page.wait_for_selector("#run-filters")

        def shown():
            return [int(t) for t in page.locator("#runs tbody tr td:nth-child(2) > a").all_inner_texts()]

        assert shown() == [mid.pk, alpha.pk, zeta.pk]  # live first, then newest
        for sort, order in (("model", [alpha.pk, mid.pk, zeta.pk]), ("status", [mid.pk, alpha.pk, zeta.pk])):
            page.select_option("#run-filters select[name=sort]", sort)
            with page.expect_navigation():
                page.click("#run-filters button[type=submit]")
            assert f"sort={sort}" in page.url and shown() == order, (sort, shown())
            assert page.eval_on_selector("#run-filters select[name=sort]", "s => s.value") == sort
        browser.close()
