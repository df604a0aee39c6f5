"""The sampling policy: configured shares (statistically, deterministic), suspicious detectors,
and the sink hook that queues items as samples are written."""
import pytest

from apps.review.models import ReviewItem
from apps.review.sampling import Policy, enqueue_for_review, flag_suspicious, hash_unit, picked
from apps.runs.sink import DjangoSink
from tests.web.review.conftest import records

pytestmark = pytest.mark.django_db


def test_it_picks_the_configured_share_of_many_keys():
    policy = Policy.of({"seed": 3, "review": {"tasks": 0.05, "rubrics": 0.2, "grades": 0.0}})
    keys = [f"{step}:doc{d}:{i}" for step in range(50) for d in range(20) for i in range(10)]  # 10,000 keys
    tasks = sum(picked(policy, "task", k) for k in keys)
    rubrics = sum(picked(policy, "rubric", k) for k in keys)
    # binomial(10000, 0.05): sd = sqrt(10000 * 0.05 * 0.95) = 21.8, so 500 +- 5 sd = [391, 609]
    assert 391 <= tasks <= 609
    # binomial(10000, 0.2): sd = 40, so 2000 +- 5 sd = [1800, 2200]
    assert 1800 <= rubrics <= 2200
    assert not any(picked(policy, "grade", k) for k in keys)


def test_sampling_is_deterministic_and_a_larger_share_only_adds_items():
    keys = [f"1:{i}" for i in range(2000)]
    small, same = Policy.of({"review": {"tasks": 0.1}}), Policy.of({"review": {"tasks": 0.1}})
    large = Policy.of({"review": {"tasks": 0.3}})
    chosen = {k for k in keys if picked(small, "task", k)}
    assert chosen == {k for k in keys if picked(same, "task", k)}
    assert chosen < {k for k in keys if picked(large, "task", k)}
    assert hash_unit(0, "task", "1:5") == hash_unit(0, "task", "1:5") != hash_unit(1, "task", "1:5")


def test_the_default_share_is_five_percent_and_a_broken_section_falls_back_to_it():
    assert Policy.of({}).shares == {"task": 0.05, "rubric": 0.05, "grade": 0.05}
    assert Policy.of({"review": {"tasks": 7}}).shares["task"] == 0.05
    assert Policy.of({"review": {"grades": 0.5}}).shares["grade"] == 0.5


def test_the_sink_queues_the_configured_kinds_with_a_snapshot(make_run):
    run = make_run(review={"tasks": 1.0, "rubrics": 1.0, "grades": 0.0, "suspicious": []})
    sink = DjangoSink(run)
    sink.samples(1, records(1, n=2))
    sink.control()
    items = ReviewItem.objects.filter(run_number=run.pk)
    assert sorted(items.values_list("kind", "key")) == [("rubric", "1:t0:r0"), ("rubric", "1:t1:r0"),
                                                        ("task", "1:t0"), ("task", "1:t1")]
    rubric = items.get(key="1:t0:r0")
    assert rubric.rubric.text == "States the year 1969." and rubric.task.key == "1:t0"
    assert rubric.snapshot["text"] == "States the year 1969." and rubric.snapshot["question"].startswith("Question 1-0")
    assert rubric.priority == "critical" and rubric.sampled and rubric.status == "pending"
    sink.samples(1, records(1, n=2))  # a resumed run re-reports the step: no duplicates
    sink.control()
    assert items.count() == 4


def test_grades_keep_the_judge_score_and_the_graded_attempt(make_run):
    run = make_run(review={"tasks": 0.0, "rubrics": 0.0, "grades": 1.0, "suspicious": []})
    enqueue_for_review(run, [])  # nothing to do
    sink = DjangoSink(run)
    sink.samples(2, records(2, score=0.0))
    sink.control()
    item = ReviewItem.objects.get(run_number=run.pk)
    assert (item.kind, item.judge_score, item.judge_pass, item.priority) == ("grade", 0.0, False, "critical")
    assert item.snapshot["attempt_text"] == "It was 1969." and item.snapshot["rubric_text"] == "States the year 1969."
    assert item.grade.key == "2:t0:a0:g0" and item.task_key == "2:t0"


def test_suspicious_items_enter_whatever_the_share(make_run):
    run = make_run(review={"tasks": 0.0, "rubrics": 0.0, "grades": 0.0})
    sink = DjangoSink(run)
    sink.samples(1, records(1, n=1, pass_rate=0.5))
    sink.control()
    assert not ReviewItem.objects.exists()
    recs = records(2, n=3, pass_rate=0.5)
    recs[0]["question"] = "question 1-0, what year?"  # same words as the step-1 task: a near-duplicate
    recs[4]["pass_rate"] = 0.0  # task 2:t1 nobody solved
    recs[8]["data"] = {"watchdog": "answer leaks into the question"}  # task 2:t2
    recs[7]["data"] = {"samples": [1, 0, 1]}  # the judge's samples disagree on grade 2:t1:a0:g0
    sink.samples(2, recs)
    sink.control()
    found = {i.key: i.suspicious for i in ReviewItem.objects.filter(run_number=run.pk)}
    assert set(found) == {"2:t0", "2:t1", "2:t2", "2:t1:a0:g0"}
    assert found["2:t0"] == ["near-duplicate of task 1:t0 (similarity 1.00)"]
    assert found["2:t1"][0].startswith("pass rate 0")
    assert found["2:t2"] == ["watchdog: answer leaks into the question"]
    assert found["2:t1:a0:g0"] == ["judge samples disagree: 2 of 3 pass"]
    assert not any(i.sampled for i in ReviewItem.objects.all())


def test_two_grades_of_one_attempt_and_rubric_on_both_sides_of_half_disagree(make_run):
    run = make_run(review={"tasks": 0.0, "rubrics": 0.0, "grades": 0.0, "suspicious": ["judge_disagreement"]})
    recs = records(1, pass_rate=0.0)
    second = {**recs[3], "key": "1:t0:a0:g1", "score": 0.0}
    sink = DjangoSink(run)
    sink.samples(1, recs + [second])
    sink.control()
    assert set(ReviewItem.objects.values_list("key", flat=True)) == {"1:t0:a0:g0", "1:t0:a0:g1"}  # not the task:
    # extreme_difficulty is switched off for this run


def test_a_watchdog_can_flag_a_stored_sample(make_run):
    run = make_run(review={"tasks": 0.0, "rubrics": 0.0, "grades": 0.0})
    sink = DjangoSink(run)
    sink.samples(1, records(1))
    sink.control()
    item = flag_suspicious(run, "rubric", "1:t0:r0", "watchdog: rubric copies the answer")
    again = flag_suspicious(run, "rubric", "1:t0:r0", "watchdog: second look")
    assert item.pk == again.pk and again.suspicious == ["watchdog: rubric copies the answer", "watchdog: second look"]
    assert again.snapshot["text"] == "States the year 1969."
    assert flag_suspicious(run, "task", "nope", "x") is None


def test_near_duplicates_within_one_flush_use_character_5gram_jaccard(make_run):
    from apps.episodes.near_duplicates import jaccard, shingles
    from apps.review.suspicious import near_duplicates

    run = make_run()
    tasks = [{"key": "1:a", "question": "The Moon orbits the Earth."},
             {"key": "1:b", "question": "the moon orbits the earth slowly"},
             {"key": "1:c", "question": "The Sun is hot."}]
    # 1:a normalized: "the moon orbits the earth" (25 characters) = 21 5-grams, all in 1:b's
    # "the moon orbits the earth slowly" (32 characters) = 28 5-grams: Jaccard = 21 / 28 = 0.75
    assert jaccard(shingles(tasks[0]["question"]), shingles(tasks[1]["question"])) == pytest.approx(0.75)
    assert near_duplicates(run.pk, tasks, threshold=0.75, recent=100) == {
        ("task", "1:b"): ["near-duplicate of task 1:a (similarity 0.75)"]}
    assert near_duplicates(run.pk, tasks, threshold=0.76, recent=100) == {}


def test_refused_tasks_are_compared_against_but_never_queued(make_run):
    """A collapsed SPICE Challenger's refused templates stay out of the review queue; a valid task repeating one of
    them is still sent."""
    from apps.review.suspicious import near_duplicates

    run = make_run()
    tasks = [{"key": "33:a", "question": "How many correct answers?", "valid": False},
             {"key": "33:b", "question": "How many correct answers?", "valid": False},
             {"key": "33:c", "question": "How many correct answers ?", "valid": True}]
    assert near_duplicates(run.pk, tasks, threshold=0.9, recent=100) == {
        ("task", "33:c"): ["near-duplicate of task 33:b (similarity 1.00)"]}
    assert near_duplicates(run.pk, tasks[:2], threshold=0.9, recent=100) == {}


def test_a_short_queue_gets_a_few_items_of_every_step():
    """At 5% a step of ten tasks usually sends none; while fewer than short_queue items wait, each
    step sends at least min_per_step of each sampled kind (the lowest hashes), marked sampled."""
    from apps.runs.models import Run

    review = {"tasks": 0.05, "rubrics": 0.0, "grades": 0.0, "suspicious": [], "min_per_step": 3, "short_queue": 5}
    run = Run.objects.create(method="spice", model_name="tiny", config={"seed": 5, "review": review}, total_steps=9)
    policy = Policy.of(run.config)
    step1 = records(1, n=10)
    keys = [r["key"] for r in step1 if r["kind"] == "task"]
    assert not any(picked(policy, "task", k) for k in keys)  # the share alone sends nothing here
    enqueue_for_review(run, step1[:20])  # a step written in two flushes: 5 tasks, then 5
    enqueue_for_review(run, step1[20:])
    queued = ReviewItem.objects.filter(run_number=run.pk, step=1)
    assert queued.count() == 3 and set(queued.values_list("kind", flat=True)) == {"task"}
    assert all(queued.values_list("sampled", flat=True))
    enqueue_for_review(run, records(2, n=10))
    assert ReviewItem.objects.filter(run_number=run.pk, step=2).count() == 3  # 3 pending < 5: still topped up
    step3 = records(3, n=10)
    enqueue_for_review(run, step3)  # 6 pending: the share alone again
    by_share = sum(picked(policy, "task", r["key"]) for r in step3 if r["kind"] == "task")
    assert ReviewItem.objects.filter(run_number=run.pk, step=3).count() == by_share < 3


def test_a_share_of_zero_is_never_topped_up(make_run):
    run = make_run(review={"tasks": 0.0, "rubrics": 0.0, "grades": 0.0, "suspicious": []})
    enqueue_for_review(run, records(1, n=10))
    assert not ReviewItem.objects.filter(run_number=run.pk).exists()
