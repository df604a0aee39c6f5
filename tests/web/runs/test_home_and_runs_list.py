"""The home page counts active runs in good English and links them (the demo run among them); the
runs list shows what each run's launcher set, so five grpo runs of one model are told apart."""
import re

import pytest

from apps.runs.models import Run
from tests.web.runs.test_live_page_browser import CHROMIUM, logged_in_page, server  # noqa: F401  (fixture)


def _run(owner, status="running", **overrides) -> Run:
    return Run.objects.create(method="grpo", model_name="smollm2-135m-instruct", config={}, owner=owner, status=status,
                              total_steps=50, queue="cpu", overrides=overrides or {})


@pytest.mark.django_db
def test_one_active_run_is_a_run_and_it_is_linked(client, researcher):
    client.force_login(researcher)
    run = _run(researcher)
    _run(researcher, status="finished")
    html = client.get("/").content.decode()
    assert re.search(r'<span class="num">1</span><span class="lbl">active run</span>', html)
    assert f'href="/runs/{run.pk}/"' in html and f"Run {run.pk} · grpo" in html
    _run(researcher, status="queued")
    html = client.get("/").content.decode()
    assert re.search(r'<span class="num">2</span><span class="lbl">active runs</span>', html)


@pytest.mark.django_db
def test_the_runs_list_shows_each_runs_settings_with_secrets_hidden(client, researcher):
    client.force_login(researcher)
    _run(researcher, config={"train": {"steps": 8, "lr": 2e-6}, "ssp": {"judge_api_key": "sk-very-secret"}},
         set=["rollout.group_size=4", "model.name_or_path=/x"])
    _run(researcher)
    html = client.get("/runs/").content.decode()
    cells = re.findall(r'<td class="settings"[^>]*>(.*?)</td>', html, re.S)
    assert len(cells) == 2
    assert "<code>rollout.group_size=4</code>" in cells[1] and "<code>train.steps=8</code>" in cells[1]
    assert "model.name_or_path" not in cells[1] and "sk-very-secret" not in html and "ssp.judge_api_key=" in cells[1]
    assert "defaults" in cells[0] and "· cpu" in cells[0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")
def test_the_home_page_leads_to_the_active_run(roles, researcher, server, monkeypatch):  # noqa: F811
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    run = _run(researcher)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, "/")
        assert page.locator(".tile .lbl").first.inner_text() == "active run"
        page.locator(f'#active-runs a[href="/runs/{run.pk}/"]').click()
        page.wait_for_url(f"{server}/runs/{run.pk}/")
        assert not errors, errors
        browser.close()
