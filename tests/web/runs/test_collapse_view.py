"""The collapse shown live on a SPICE run's page (issue 30): per step the task gate's refusals by rule (stacked
bars of gate_<rule>_rate), the largest answer share, the largest template cluster and the guess probe's pass
rate, declared in SpiceSection.panel_metrics and read by apps/runs/method_panel.collapse_view; in a real browser
the charts draw the stored steps and extend with a step the sink reports while the page is open."""
import json
import re
import threading

import pytest
from django.db import connection

from apps.runs import method_panel
from apps.runs.models import Metric, Run
from apps.runs.sink import DjangoSink
from tests.web.runs.test_live_page_browser import CHROMIUM, logged_in_page, server  # noqa: F401  (fixture)
from trainer.method_configs import GATE_RULES, SECTIONS
from trainer.methods.gate import RULES

STEPS = {1: {"gate_repeated_answer_rate": 0.1, "gate_guessable_rate": 0.0, "answer_share_max": 0.2,
             "template_cluster_max": 0.1, "guess_pass_rate": 0.3},
         2: {"gate_repeated_answer_rate": 0.3, "gate_guessable_rate": 0.2, "answer_share_max": 0.6,
             "template_cluster_max": 0.4, "guess_pass_rate": 0.6},
         3: {"gate_repeated_answer_rate": 0.4, "gate_guessable_rate": 0.3, "answer_share_max": 0.9,
             "template_cluster_max": 0.7, "guess_pass_rate": 0.8}}


def test_the_spice_panel_declares_every_gate_rule_and_the_family_metrics():
    assert GATE_RULES == tuple(RULES)  # the web's copy of the rule names is the gate's
    names = {name for role, name, _ in SECTIONS["spice"].panel_metrics if role == "challenger"}
    assert {f"gate_{rule}_rate" for rule in RULES} <= names
    assert {"answer_share_max", "template_cluster_max", "guess_pass_rate"} <= names


def _spice_run(researcher, **fields) -> Run:
    run = Run.objects.create(method="spice", model_name="tiny", owner=researcher, total_steps=10,
                             config={"method": "spice", "watchdog": {"collapse_share": 0.6}}, **fields)
    Metric.objects.bulk_create(Metric(run=run, step=step, role="challenger", name=name, value=value)
                               for step, values in STEPS.items() for name, value in values.items())
    Metric.objects.create(run=run, step=3, role="reasoner", name="answer_share_max", value=0.99)  # another role's
    return run


@pytest.mark.django_db
def test_the_collapse_view_holds_each_series_by_step(researcher, client):
    run = _spice_run(researcher)
    view = method_panel.panel(run)["collapse"]
    gates = {s["name"]: s for s in view["gates"]}
    assert set(gates) == {f"gate_{rule}_rate" for rule in RULES}  # every rule, reported or not
    assert gates["gate_repeated_answer_rate"]["steps"] == [1, 2, 3]
    assert gates["gate_repeated_answer_rate"]["values"] == [0.1, 0.3, 0.4]
    assert gates["gate_copy_ratio_rate"]["steps"] == []
    family = {s["name"]: s for s in view["family"]}
    assert list(family) == ["answer_share_max", "template_cluster_max", "guess_pass_rate"]
    assert family["answer_share_max"]["values"] == [0.2, 0.6, 0.9]  # the challenger's, not the reasoner's 0.99
    assert view["threshold"] == 0.6 and view["reported"]
    client.force_login(researcher)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="collapse-gates"' in html and 'id="collapse-family"' in html
    data = json.loads(re.search(r'<script id="collapse-data" type="application/json">(.*?)</script>', html, re.S)[1])
    assert data == json.loads(json.dumps(view))


@pytest.mark.django_db
def test_a_run_without_gate_metrics_says_it_waits(researcher, client):
    run = Run.objects.create(method="spice", model_name="tiny", owner=researcher, config={"method": "spice"})
    view = method_panel.panel(run)["collapse"]
    assert not view["reported"] and view["threshold"] == 0.5  # the watchdog's default
    client.force_login(researcher)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert re.search(r'<p class="muted" id="collapse-waiting">No gate metrics reported yet', html)


def _report(run_id):
    try:
        sink = DjangoSink(run_id)
        sink.metrics(4, "challenger", {"gate_repeated_answer_rate": 0.5, "gate_guessable_rate": 0.4,
                                       "answer_share_max": 0.95, "template_cluster_max": 0.8, "guess_pass_rate": 0.9})
        sink.flush()
        assert sink.publish_failures == 0
    finally:
        connection.close()


GATE_X = "() => { const c = document.getElementById('collapse-gates'); return c.data ? c.data.map(t => [t.name, [...t.x]]) : []; }"
FAMILY_Y = ("() => { const c = document.getElementById('collapse-family'); return c.data ? "
            "Object.fromEntries(c.data.map(t => [t.name, [...t.y]])) : {}; }")


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")
def test_the_collapse_charts_draw_and_grow_live_in_a_browser(roles, researcher, server, monkeypatch):  # noqa: F811
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    run = _spice_run(researcher)
    run.mark_running("w")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, f"/runs/{run.pk}/")
        page.wait_for_function(f"() => ({GATE_X})().length > 0", timeout=30_000)
        bars = dict(page.evaluate(GATE_X))
        assert bars == {"repeated answer": [1, 2, 3], "guessable": [1, 2, 3]}  # rules never reported are left out
        assert page.evaluate("document.getElementById('collapse-gates').layout.barmode") == "stack"
        assert page.evaluate(FAMILY_Y)["largest answer share"] == [0.2, 0.6, 0.9]
        assert page.evaluate("document.getElementById('collapse-family').layout.shapes[0].y0") == 0.6
        reporter = threading.Thread(target=_report, args=(run.pk,))  # as a worker does
        reporter.start()
        reporter.join()
        page.wait_for_function(f"() => ({GATE_X})().every(([name, x]) => x.includes(4))", timeout=30_000)
        assert page.evaluate(FAMILY_Y) == {"largest answer share": [0.2, 0.6, 0.9, 0.95],
                                           "largest template cluster": [0.1, 0.4, 0.7, 0.8],
                                           "guess-probe pass rate": [0.3, 0.6, 0.8, 0.9]}
        assert page.locator("#collapse-waiting").is_hidden()
        assert not errors, errors
        browser.close()
