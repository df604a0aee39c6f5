"""The health watchdog on synthetic metric series: each rule, firing once, pausing when asked."""
from apps.runs.models import Metric, Run, RunEvent, Status
from apps.runs.sink import DjangoSink
from apps.runs.watchdog import (entropy_collapse, length_runaway, reward_heldout_divergence, zero_variance,
                                check_run)
from trainer.config import WatchdogConfig

CFG = WatchdogConfig()  # window 3, entropy_min 0.05, zero_variance_max 0.9, length_factor 3


def test_entropy_collapse_needs_the_whole_window_below_the_floor():
    assert entropy_collapse({"entropy": [1.2, 0.04, 0.03]}, CFG) is None  # 1.2 is inside the window of 3
    assert "entropy collapse" in entropy_collapse({"entropy": [1.2, 0.04, 0.03, 0.01]}, CFG)
    assert entropy_collapse({"entropy": [0.01, 0.01]}, CFG) is None  # shorter than the window


def test_zero_variance_groups_and_length_runaway():
    assert zero_variance({"zero_variance_groups": [1.0, 0.95, 0.92]}, CFG)
    assert zero_variance({"zero_variance_groups": [1.0, 0.5, 0.92]}, CFG) is None
    # first three lengths have median 100; the last three exceed 3 x 100 = 300
    assert "runaway" in length_runaway({"response_length": [90, 100, 110, 350, 400, 500]}, CFG)
    assert length_runaway({"response_length": [90, 100, 110, 350, 290, 500]}, CFG) is None


def test_reward_up_while_heldout_down():
    series = {"reward_mean": [0.2, 0.3, 0.5], "heldout_accuracy": [0.40, 0.38, 0.30]}  # drop 0.10 > 0.05
    assert "reward hacking" in reward_heldout_divergence(series, CFG)
    series["heldout_accuracy"] = [0.40, 0.39, 0.38]  # drop 0.02: noise
    assert reward_heldout_divergence(series, CFG) is None


def _running_run(config=None):
    return Run.objects.create(method="grpo", model_name="tiny", config=config or {}, status=Status.RUNNING)


def _metrics(run, name, values, role="policy"):
    Metric.objects.bulk_create(Metric(run=run, step=i, role=role, name=name, value=v) for i, v in enumerate(values))


def test_a_firing_rule_writes_one_event_and_pauses_at_the_step_boundary(db):
    run = _running_run()
    _metrics(run, "entropy", [1.0, 0.02, 0.01, 0.01])
    sink = DjangoSink(run.pk)
    control = sink.control()
    assert control.pause  # entropy_collapse is in the default pause_on
    events = RunEvent.objects.filter(run=run, kind=RunEvent.Kind.WATCHDOG)
    assert events.count() == 1 and "entropy collapse" in events.get().message
    run.refresh_from_db()
    assert run.requested == "pause"
    assert check_run(run) == []  # fires once per run, not at every step


def test_a_rule_not_in_pause_on_only_records_and_a_disabled_watchdog_is_silent(db):
    run = _running_run()
    _metrics(run, "zero_variance_groups", [1.0, 1.0, 1.0])
    ((rule, message, paused),) = check_run(run)
    assert rule == "zero_variance" and not paused
    run.refresh_from_db()
    assert run.requested == ""
    quiet = _running_run({"watchdog": {"enabled": False}})
    _metrics(quiet, "entropy", [0.0, 0.0, 0.0])
    assert check_run(quiet) == []
