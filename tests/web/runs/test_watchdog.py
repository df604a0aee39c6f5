"""The health watchdog on synthetic metric series: each rule, firing once, pausing when asked."""
from apps.episodes.models import Task
from apps.runs.models import Metric, Run, RunEvent, Status
from apps.runs.sink import DjangoSink
from apps.runs.watchdog import (collapse, entropy_collapse, length_runaway, reward_heldout_divergence, zero_variance,
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


def _family(answer, template, tasks):
    return {"family_steps": list(range(len(answer))), "family_answer": answer, "family_template": template,
            "family_tasks": tasks}


def test_collapse_needs_one_family_above_the_share_with_enough_valid_tasks_for_the_whole_window():
    # "How many continents does Niger lie on?" -> 1: one answer takes 90% of the valid tasks
    assert "one answer 90%" in collapse(_family([0.2, 0.7, 0.8, 0.9], [0.1, 0.1, 0.2, 0.2], [16] * 4), CFG)
    # one template cluster (names masked) takes the step: the same rule by the other share
    assert "one template 75%" in collapse(_family([0.1, 0.1, 0.1], [0.6, 0.7, 0.75], [16] * 3), CFG)
    assert collapse(_family([0.2, 0.9, 0.9], [0.1] * 3, [16] * 3), CFG) is None  # 0.2 inside the window
    assert collapse(_family([0.5, 0.5, 0.5], [0.5] * 3, [16] * 3), CFG) is None  # at the threshold, not above
    # a step with 2 valid tasks (a CPU smoke run) is its own 100% family: not judged
    assert collapse(_family([1.0, 1.0, 1.0], [1.0] * 3, [16, 2, 16]), CFG) is None
    assert collapse({}, CFG) is None  # a method without the task gate's metrics
    assert collapse(_family([0.9, 0.9, 0.9], [0.0] * 3, [8] * 3),
                    WatchdogConfig(collapse_share=0.95)) is None  # the threshold is the config's


def _tasks(run, step, answers, role="challenger", valid=True):
    Task.objects.bulk_create(Task(run=run, key=f"s{step}-{i}", step=step, role=role, question=f"q{i}?", answer=a,
                                  valid=valid) for i, a in enumerate(answers))


def test_the_collapse_rule_fires_on_a_metric_series_pauses_and_names_the_steps(db):
    run = Run.objects.create(method="spice", model_name="tiny", config={}, status=Status.RUNNING)
    shares = [0.3, 0.9, 0.95, 0.94]
    _metrics(run, "answer_share_max", shares, role="challenger")
    _metrics(run, "template_cluster_max", [0.1] * 4, role="challenger")
    for step in range(4):
        _tasks(run, step, ["1"] * 10)
    control = DjangoSink(run.pk).control()
    assert control.pause  # collapse is in the default pause_on
    event = RunEvent.objects.get(run=run, kind=RunEvent.Kind.WATCHDOG)
    assert "task collapse" in event.message and event.data["rule"] == "collapse"
    assert event.data["role"] == "challenger" and event.data["steps"] == [1, 2, 3]
    run.refresh_from_db()
    assert run.requested == "pause"


def test_the_collapse_rule_counts_the_stored_valid_tasks_and_can_record_without_pausing(db):
    run = Run.objects.create(method="spice", model_name="tiny", status=Status.RUNNING,
                             config={"watchdog": {"pause_on": ["entropy_collapse"]}})
    _metrics(run, "answer_share_max", [0.9, 0.9, 0.9], role="challenger")
    for step in range(3):
        _tasks(run, step, ["1"] * 7)  # 7 valid tasks a step, under collapse_min_tasks (8)
        _tasks(run, step + 100, ["x"] * 5, valid=False)  # invalid ones (other keys) do not count
    assert check_run(run) == []
    Task.objects.create(run=run, key="late", step=0, role="challenger", answer="1")
    assert check_run(run) == []  # step 0 has 8 now, steps 1 and 2 still 7
    for step in (1, 2):
        Task.objects.create(run=run, key=f"late{step}", step=step, role="challenger", answer="1")
    ((rule, message, paused),) = check_run(run)
    assert rule == "collapse" and not paused and "of 8 valid tasks" in message


def test_held_out_evaluations_reach_the_reward_heldout_rule(db):
    """Evaluations are EvalResult rows, never metrics: the rule reads them, the benchmark evaluated at the
    most checkpoints, against each role's reward at the evaluated steps."""
    from apps.evals.models import Benchmark, EvalJob, EvalResult

    run = Run.objects.create(method="ssp", model_name="tiny", config={}, status=Status.RUNNING)
    _metrics(run, "reward_mean", [0.1, 0.2, 0.1, 0.3, 0.2, 0.5, 0.6], role="solver")  # steps 0..6
    _metrics(run, "reward_mean", [0.5, 0.5, 0.5, 0.4, 0.4, 0.3, 0.3], role="proposer")
    main = Benchmark.objects.create(name="nq-heldout", kind="upload", scoring="exact", size=10)
    once = Benchmark.objects.create(name="aaa-once", kind="upload", scoring="exact", size=10)
    for step, score in ((2, 0.50), (4, 0.42), (6, 0.30)):
        job = EvalJob.objects.create(model_spec=f"run:{step}", run=run, step=step, status="finished")
        EvalResult.objects.create(job=job, benchmark=main, scoring="exact", n=10, score=score, complete=True)
        if step == 6:
            EvalResult.objects.create(job=job, benchmark=once, scoring="exact", n=10, score=0.9, complete=True)
    fired = check_run(run)
    assert [(rule, text.split("]")[0]) for rule, text, _ in fired] == [("reward_heldout_divergence", "[solver")]
    assert "0.500 -> 0.300" in fired[0][1]  # held-out at steps 2, 4, 6; the solver's reward there 0.1 -> 0.6
    assert not Run.objects.get(pk=run.pk).requested  # not in the default pause_on: recorded only
