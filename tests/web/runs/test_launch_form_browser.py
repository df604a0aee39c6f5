"""The launch form and a queued run in a real browser on the real server (issue 20, items 2 and 6):
the few fields first, the rest folded under "advanced", the cost estimate updating as a field
changes, group_size=100000 refused at the field, the CPU smoke-test preset, the warning for a queue
no live worker serves (train.device auto on this GPU-less machine goes to gpu), the run page saying
what the run waits for, and "Clone this run"."""
import pytest

from apps.runs.models import Run
from tests.web.runs.test_live_page_browser import CHROMIUM, logged_in_page, server  # noqa: F401  (fixture)

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")]


def test_launch_form_estimate_bounds_preset_warning_and_clone(roles, researcher, server, run_env, monkeypatch):  # noqa: F811
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API runs an event loop here
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, "/runs/new/?method=grpo")
        assert page.input_value("#id_cfg__data__path") == "bundled:gsm8k"
        assert page.is_visible("#id_cfg__rollout__group_size") and not page.is_visible("#id_cfg__train__clip_low")
        assert "at most 32,768 generated tokens a step" in page.inner_text("#estimate")

        page.fill("#id_cfg__rollout__group_size", "100000")
        page.dispatch_event("#id_cfg__rollout__group_size", "change")
        page.wait_for_function("() => document.querySelector('#estimate-text').innerText.includes('fix the fields')",
                               timeout=30_000)
        page.click("form.launch-form button[type=submit]")
        page.wait_for_selector(".has-error #id_cfg__rollout__group_size", timeout=30_000)
        assert "less than or equal to 512" in page.inner_text("#first-fields")

        page.fill("#id_cfg__rollout__group_size", "4")
        page.dispatch_event("#id_cfg__rollout__group_size", "change")
        page.wait_for_function("() => document.querySelector('#estimate-text').innerText.includes('16,384')",
                               timeout=30_000)  # 8 prompts x 4 x 512
        assert "no live worker serves the gpu queue" in page.inner_text("#estimate")
        page.click("form.launch-form button[type=submit]")
        page.wait_for_url(f"{server}/runs/*/", timeout=30_000)
        assert "no live worker serves the gpu queue" in page.inner_text(".messages")
        assert page.inner_text("#run-waiting-for").startswith("no live worker serves gpu: start one with")

        page.click("#run-clone")
        page.wait_for_selector("#clone-note", timeout=30_000)
        assert page.input_value("#id_cfg__rollout__group_size") == "4"

        page.click("#preset-cpu-smoke")
        page.wait_for_selector("#preset-note", timeout=30_000)
        assert page.input_value("#id_cfg__train__steps") == "2" and page.input_value("#id_queue") == "cpu"
        assert "at most 64 generated tokens a step" in page.inner_text("#estimate")
        assert not errors, errors
        browser.close()
    run = Run.objects.get()
    assert (run.queue, run.config["rollout"]["group_size"]) == ("gpu", 4)
