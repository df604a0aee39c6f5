"""A control keeps its run's length in steps (apps/runs/sink.py DjangoSink._pace): a control whose run ended at
step N stops at step N (ending finished, with an event saying why), and a control that caught up with its
time-limited run waits at the step boundary until the run moves on."""
import threading
import time

import pytest

from apps.runs import sink as sink_module
from apps.runs.models import Run, Status
from apps.runs.services.launch import launch
from apps.runs.sink import DjangoSink
from tests.web.runs.conftest import burst

pytestmark = pytest.mark.django_db(transaction=True)


def _run_and_control(researcher, tiny_grpo, steps=6, time_limit=0.0):
    model, config = tiny_grpo
    config = {**config, "train": {**config["train"], "steps": steps, "time_limit_minutes": time_limit}}
    run = launch("grpo", model, None, config=config, user=researcher, control="random-reward")
    return run, run.controls.get()


def test_a_control_stops_at_the_step_its_run_ended_at(roles, researcher, tiny_grpo):
    run, control = _run_and_control(researcher, tiny_grpo, steps=6)
    # the run ended at step 3 (its time limit, as a busier card's run does): the control, trained after it by the
    # same worker, makes 3 steps too instead of 6
    Run.objects.filter(pk=run.pk).update(status=Status.FINISHED, current_step=3)
    burst("cpu")
    control.refresh_from_db()
    assert control.status == "finished", control.error
    assert control.current_step == 3
    assert control.events.filter(message__startswith="stopped at step 3: its run").exists()
    assert control.checkpoints.filter(step=3).exists()  # it ends as a time limit does: resumable from a checkpoint


def test_a_control_with_no_run_ahead_or_ended_trains_its_steps(roles, researcher, tiny_grpo):
    run, control = _run_and_control(researcher, tiny_grpo, steps=4)
    burst("cpu")  # the run first (queued first), then its control: both make all 4 steps
    run.refresh_from_db()
    control.refresh_from_db()
    assert (run.status, run.current_step) == ("finished", 4)
    assert (control.status, control.current_step) == ("finished", 4), control.error
    assert not control.events.filter(message__startswith="stopped at step").exists()  # its own last step, no pacing


def _mark(run, **fields):
    Run.objects.filter(pk=run.pk).update(**fields)


def _mark_from_thread(run, **fields):
    """_mark in another thread, which then closes its own database connection (the test database is dropped at
    the end)."""
    from django.db import connection

    try:
        _mark(run, **fields)
    finally:
        connection.close()


def _both_training(researcher, tiny_grpo, time_limit: float, run_step: int, control_step: int):
    """A run at ``run_step`` and its control, both running, the control having reported ``control_step``: (run,
    control, the control's sink)."""
    run, control = _run_and_control(researcher, tiny_grpo, steps=6, time_limit=time_limit)
    _mark(run, status=Status.RUNNING, current_step=run_step)
    _mark(control, status=Status.RUNNING)
    sink = DjangoSink(control.pk)
    sink.metrics(control_step, "solver", {"reward_mean": 0.5})
    return run, control, sink


def _timed_control(sink, then=None):
    """(the sink's control answer, seconds it took); ``then`` (a started thread or timer) is joined after."""
    t0 = time.monotonic()
    answer = sink.control()
    seconds = time.monotonic() - t0
    if then is not None:
        then.join()
    return answer, seconds


def test_a_control_ahead_of_its_time_limited_run_waits_for_it(roles, researcher, tiny_grpo, monkeypatch):
    monkeypatch.setattr(sink_module, "PACE_POLL_SECONDS", 0.05)
    run, _, sink = _both_training(researcher, tiny_grpo, 30.0, run_step=2, control_step=2)  # as far as its run
    mover = threading.Timer(0.6, lambda: _mark_from_thread(run, current_step=3))
    mover.start()
    answer, waited = _timed_control(sink, mover)
    assert not answer.stop and not answer.pause
    assert waited >= 0.5, waited  # it waited for the run's step 3

    # without a time limit on the run, nothing to wait for: a run that is not limited makes all its steps
    _, _, sink = _both_training(researcher, tiny_grpo, 0.0, run_step=1, control_step=2)
    answer, waited = _timed_control(sink)
    assert not answer.stop and waited < 0.5


def test_a_cancel_of_the_control_ends_its_wait(roles, researcher, tiny_grpo, monkeypatch):
    monkeypatch.setattr(sink_module, "PACE_POLL_SECONDS", 0.05)
    _, control, sink = _both_training(researcher, tiny_grpo, 30.0, run_step=1, control_step=1)
    timer = threading.Timer(0.4, lambda: _mark_from_thread(control, requested="cancel"))
    timer.start()
    answer, seconds = _timed_control(sink, timer)
    assert answer.stop and seconds < 5


def test_a_pause_of_the_control_wins_over_pacing(roles, researcher, tiny_grpo):
    run, control, sink = _both_training(researcher, tiny_grpo, 30.0, run_step=3, control_step=3)
    _mark(run, status=Status.FINISHED)  # the run ended early, at step 3 of 6
    _mark(control, requested="pause")
    answer = sink.control()
    assert answer.pause and not answer.stop  # paused, as asked; not stopped (which would end it paused anyway)


def test_a_control_ahead_of_a_paused_run_trains_on_and_says_so(roles, researcher, tiny_grpo):
    run, control, sink = _both_training(researcher, tiny_grpo, 30.0, run_step=2, control_step=3)
    _mark(run, status=Status.PAUSED)
    answer, seconds = _timed_control(sink)
    assert not answer.stop and seconds < 0.5
    (note,) = control.events.filter(message__startswith="ahead of its run")
    assert "its run is paused at step 2" in note.message
    sink.control()
    assert control.events.filter(message__startswith="ahead of its run").count() == 1  # said once
