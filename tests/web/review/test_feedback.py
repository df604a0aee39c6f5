"""Verdicts reach the recipe through a real DjangoSink's control(), once, oldest first, each
with a RunEvent; after a resume they are handed again; SCORE harness edits travel the same way."""
import pytest
from django.utils import timezone

from apps.review.models import HarnessEdit, ReviewError, ReviewItem
from apps.runs.models import RunEvent, Status
from apps.runs.sink import DjangoSink
from tests.web.review.conftest import records
from trainer.sink import Verdict

pytestmark = pytest.mark.django_db


def _queue(run, step=1, n=2):
    sink = DjangoSink(run)
    sink.samples(step, records(step, n=n))
    assert sink.control().verdicts == []  # nothing reviewed yet
    return sink


def test_a_flag_during_a_running_run_reaches_the_next_step_boundary(run, reviewer):
    sink = _queue(run)
    ReviewItem.objects.get(run_number=run.pk, kind="task", key="1:t1").review(reviewer, "flag", reason="gold is wrong")
    ReviewItem.objects.get(run_number=run.pk, kind="task", key="1:t0").review(reviewer, "approve")
    control = sink.control()
    assert control.verdicts == [Verdict("task", "1:t1", "flag", None, "gold is wrong"),
                                Verdict("task", "1:t0", "approve", None, "")]
    assert sink.control().verdicts == []  # each verdict is handed over once
    flagged = ReviewItem.objects.get(key="1:t1", kind="task")
    assert flagged.applied_at is not None and flagged.reviewer == reviewer and flagged.reviewed_at <= flagged.applied_at
    events = RunEvent.objects.filter(run=run, kind="verdict").order_by("id")
    assert [e.data["key"] for e in events] == ["1:t1", "1:t0"]
    assert events[0].message == ("review: task 1:t1 flagged by vic (gold is wrong): excluded from solver training; "
                                 "invalid for the challenger")


def test_a_rubric_edit_and_a_grade_flag_are_handed_over_as_verdicts(run, reviewer):
    sink = _queue(run)
    ReviewItem.objects.get(kind="rubric", key="1:t0:r0").review(reviewer, "approve", edit="  Gives the year 1969 and the month July. ")
    ReviewItem.objects.get(kind="grade", key="1:t0:a0:g0").review(reviewer, "flag", reason="the answer has no month")
    verdicts = sink.control().verdicts
    assert verdicts == [Verdict("rubric", "1:t0:r0", "approve", "Gives the year 1969 and the month July.", ""),
                        Verdict("grade", "1:t0:a0:g0", "flag", None, "the answer has no month")]
    messages = list(RunEvent.objects.filter(run=run, kind="verdict").order_by("id").values_list("message", flat=True))
    assert messages[0] == "review: rubric 1:t0:r0 edited by vic: the new text replaces the judge's rubric"
    assert messages[1].endswith("recorded as a judge disagreement")


def test_reviewing_again_sends_the_new_verdict(run, reviewer):
    sink = _queue(run)
    item = ReviewItem.objects.get(kind="task", key="1:t0")
    item.review(reviewer, "flag", reason="off topic")
    assert [v.verdict for v in sink.control().verdicts] == ["flag"]
    item.review(reviewer, "approve")  # changed their mind: the recipe lifts the flag
    assert [v.verdict for v in sink.control().verdicts] == ["approve"]


def test_bad_verdicts_are_refused_with_a_reason(run, reviewer):
    _queue(run)
    task = ReviewItem.objects.get(kind="task", key="1:t0")
    with pytest.raises(ReviewError, match="approve' or 'flag"):
        task.review(reviewer, "maybe")
    with pytest.raises(ReviewError, match="a task edit is .* not JSON"):
        task.review(reviewer, "approve", edit="new text")
    with pytest.raises(ReviewError, match="only tasks and rubrics can be edited"):
        ReviewItem.objects.get(kind="grade", key="1:t0:a0:g0").review(reviewer, "approve", edit="new text")
    with pytest.raises(ReviewError, match="at most 4000"):
        ReviewItem.objects.get(kind="rubric", key="1:t0:r0").review(reviewer, "approve", edit="x" * 4001)
    task.refresh_from_db()
    assert task.status == "pending" and task.reviewer is None


def test_verdicts_given_to_an_earlier_job_are_handed_again_after_a_resume(run, reviewer):
    sink = _queue(run)
    ReviewItem.objects.get(kind="task", key="1:t0").review(reviewer, "flag", reason="off topic")
    assert len(sink.control().verdicts) == 1
    run.mark_paused()
    run.transition(Status.QUEUED, "resume", expect=Status.PAUSED)
    assert run.mark_running("worker-2")  # a new job, restored from a checkpoint that may predate the flag
    resumed = DjangoSink(run)
    assert resumed.control().verdicts == [Verdict("task", "1:t0", "flag", None, "off topic")]
    assert resumed.control().verdicts == []
    assert RunEvent.objects.filter(run=run, kind="verdict", message__contains="handed again").count() == 1


def test_verdicts_survive_the_deletion_of_the_run(run, reviewer):
    _queue(run)
    ReviewItem.objects.get(kind="task", key="1:t1").review(reviewer, "flag", reason="ambiguous")
    number = run.pk
    run.delete()
    item = ReviewItem.objects.get(run_number=number, kind="task", key="1:t1")
    assert item.run is None and item.task is None and item.status == "flagged" and item.reviewer_name == "vic"
    assert item.snapshot["question"] == "Question 1-1: what year?"


def test_a_harness_edit_is_handed_over_once_the_newest_winning(make_run, researcher):
    run = make_run("score")
    sink = DjangoSink(run)
    assert sink.control().harness is None
    old = {"notes": "old"}
    HarnessEdit.objects.create(run=run, harness=old, author=researcher, created=timezone.now())
    new = HarnessEdit.objects.create(run=run, harness={"notes": "new"}, author=researcher)
    assert sink.control().harness == {"notes": "new"}
    assert sink.control().harness is None
    assert HarnessEdit.objects.filter(run=run, applied_at__isnull=True).count() == 0
    new.refresh_from_db()
    assert new.applied_at is not None


def test_a_task_edit_reaches_the_recipe_and_rewrites_its_stored_copies(run, reviewer):
    """A reviewer corrects a task's question and gold answer: the sink hands the edit over at the next step
    boundary, and the recipe's review state rewrites the task where it still holds it (SSP's replay
    buffer, SCOPE's pool); a later flag of another task still works the old way."""
    from trainer.methods.review import ReviewState

    sink = _queue(run)
    task = ReviewItem.objects.get(kind="task", key="1:t0")
    task.review(reviewer, "approve", edit={"question": "In which year did Apollo 11 land?", "answer": "1969"})
    task.refresh_from_db()
    assert task.as_dict()["edit"] == {"question": "In which year did Apollo 11 land?", "answer": "1969"}
    [verdict] = sink.control().verdicts
    assert verdict.task_edit() == {"question": "In which year did Apollo 11 land?", "answer": "1969"}

    state = ReviewState()
    buffer = [{"key": "1:t0", "question": "Question 1-0: what year?", "answer": "1968", "step": 1},
              {"key": "1:t1", "question": "Question 1-1: what year?", "answer": "1969", "step": 1}]
    state.apply([verdict])
    assert state.apply_edits(buffer) == 1
    assert buffer[0]["question"] == "In which year did Apollo 11 land?" and buffer[0]["answer"] == "1969"
    assert buffer[1]["question"] == "Question 1-1: what year?"
    pool = [{"key": "1:t0", "question": "old"}]  # SCOPE's pool has no gold answer: only the question changes
    assert state.apply_edits(pool) == 1 and pool == [{"key": "1:t0", "question": "In which year did Apollo 11 land?"}]
    resumed = ReviewState()
    resumed.load_state_dict(state.state_dict())  # the edit survives a checkpoint
    assert resumed.edits == state.edits


def test_an_unchanged_task_edit_is_a_plain_verdict(run, reviewer):
    _queue(run)
    task = ReviewItem.objects.get(kind="task", key="1:t0")
    snap = task.snapshot
    task.review(reviewer, "approve", edit={"question": snap["question"], "answer": snap["answer"]})
    task.refresh_from_db()
    assert task.edit == "" and task.as_verdict().task_edit() is None
