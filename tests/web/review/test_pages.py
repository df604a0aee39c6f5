"""Review pages: the queue shows one item with its context (escaped), verdict forms, role checks,
the run page's review panel and the SCORE harness editor."""
import pytest

from apps.corpora.models import Corpus, Document
from apps.review.models import ReviewItem
from apps.runs.models import RunEvent
from apps.runs.sink import DjangoSink
from tests.web.review.conftest import records

pytestmark = pytest.mark.django_db

EVIL = '<script>alert("x")</script><b>bold</b>'


@pytest.fixture
def queued(run):
    sink = DjangoSink(run)
    recs = records(1, n=2)
    recs[0]["question"] = f"Which year? {EVIL}"
    recs[2]["text"] = f"1969 {EVIL}"
    recs[2]["passages"] = [{"document_id": "1", "chunk_id": "1", "title": "Apollo", "text": "Apollo 11 landed in 1969."}]
    sink.samples(1, recs)
    sink.control()
    return run


def test_the_queue_shows_one_item_with_its_context_escaped(client, queued, reviewer):
    client.force_login(reviewer)
    page = client.get(f"/review/?run={queued.pk}&kind=task")
    html = page.content.decode()
    assert page.status_code == 200 and 'data-item="' in html
    assert "<script>alert" not in html and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "States the year 1969." in html  # the rubric list
    assert "Apollo 11 landed in 1969." in html  # retrieved passages
    assert "1969 &lt;script&gt;" in html  # the attempt
    assert "Grade 1.00" in html and "(pass)" in html
    assert 'id="next"' in html and "after=" in html


def test_a_task_item_shows_every_answer_to_the_task(client, queued, reviewer):
    sink = DjangoSink(queued)
    sink.samples(1, [{"kind": "attempt", "key": f"1:t0:a{j}", "task_key": "1:t0", "role": "solver", "step": 1,
                      "text": f"Answer number {j}: 19{60 + j}", "reward": float(j == 1)} for j in (1, 2, 3)])
    sink.control()
    client.force_login(reviewer)
    item = ReviewItem.objects.get(run_number=queued.pk, kind="task", key="1:t0")
    html = client.get(f"/review/?run={queued.pk}&item={item.pk}").content.decode()
    others = html[html.index('id="other-attempts"'):]
    assert "Other answers to this task <span class=\"muted\">(3)</span>" in html
    assert all(f"Answer number {j}: 19{60 + j}" in others for j in (1, 2, 3)) and "reward 1.000" in others


def test_the_queue_shows_the_source_document(client, make_run, reviewer):
    corpus = Corpus.objects.create(name="wiki")
    doc = Document.objects.create(corpus=corpus, title="Moon landing", text="Neil Armstrong walked on the Moon.",
                                  content_hash="h1")
    run = make_run(review={"tasks": 1.0})
    run.corpus = corpus
    run.save()
    recs = records(1)[:1]
    recs[0]["document_id"] = str(doc.pk)
    sink = DjangoSink(run)
    sink.samples(1, recs)
    sink.control()
    client.force_login(reviewer)
    html = client.get(f"/review/?run={run.pk}").content.decode()
    assert "Moon landing" in html and "Neil Armstrong walked on the Moon." in html


def test_a_posted_verdict_is_saved_and_the_next_item_shown(client, queued, reviewer):
    client.force_login(reviewer)
    first = ReviewItem.objects.filter(run_number=queued.pk, kind="task").order_by("id").first()
    response = client.post(f"/review/items/{first.pk}/", {"verdict": "flag", "reason": "leaks the answer",
                                                          "run": queued.pk, "kind": "task"})
    assert response.status_code == 302 and f"after={first.pk}" in response.url and "kind=task" in response.url
    first.refresh_from_db()
    assert (first.status, first.reason, first.reviewer_name) == ("flagged", "leaks the answer", "vic")
    page = client.get(response.url)
    assert "Task 1:t0 of run" in page.content.decode()  # the success message
    second = ReviewItem.objects.filter(run_number=queued.pk, kind="task").order_by("id").last()
    assert f'data-item="{second.pk}"' in page.content.decode()


def test_a_rubric_is_edited_in_place_and_bad_input_is_explained(client, queued, reviewer):
    client.force_login(reviewer)
    rubric = ReviewItem.objects.get(kind="rubric", key="1:t0:r0")
    html = client.get(f"/review/?item={rubric.pk}").content.decode()
    assert 'id="edit-box"' in html and "States the year 1969.</textarea>" in html
    client.post(f"/review/items/{rubric.pk}/", {"verdict": "approve", "with_edit": "1", "edit": "Names the year."})
    rubric.refresh_from_db()
    assert rubric.edit == "Names the year." and rubric.status == "approved"
    task = ReviewItem.objects.get(kind="task", key="1:t1")
    response = client.post(f"/review/items/{task.pk}/", {"verdict": "skip"}, follow=True)
    assert "Not saved: verdict must be" in response.content.decode()
    task.refresh_from_db()
    assert task.status == "pending"


def test_the_queue_page_needs_the_reviewer_role(client, queued, researcher, reader, admin_user):
    for user in (researcher, reader):
        client.force_login(user)
        assert client.get("/review/").status_code == 403
        assert client.post(f"/review/items/{ReviewItem.objects.first().pk}/", {"verdict": "flag"}).status_code == 403
    client.force_login(admin_user)
    assert client.get("/review/").status_code == 200
    client.logout()
    assert client.get("/review/").status_code == 302  # to the login page


def test_researchers_can_launch_and_reviewers_cannot(client, reviewer, researcher):
    client.force_login(researcher)
    assert client.get("/runs/new/").status_code == 200
    client.force_login(reviewer)
    assert client.get("/runs/new/").status_code == 403


def test_bad_filters_on_the_page_are_explained(client, reviewer):
    client.force_login(reviewer)
    response = client.get("/review/?kind=essay", follow=True)
    assert "kind: unknown kind" in response.content.decode()
    assert "Nothing to review." in response.content.decode()


def test_the_run_page_shows_applied_verdicts_and_agreement(client, queued, reviewer, researcher):
    ReviewItem.objects.get(kind="task", key="1:t0").review(reviewer, "flag", reason="bad gold")
    ReviewItem.objects.get(kind="grade", key="1:t0:a0:g0").review(reviewer, "flag", reason="judge too strict")
    ReviewItem.objects.get(kind="grade", key="1:t1:a0:g0").review(reviewer, "approve")
    DjangoSink(queued).control()
    client.force_login(researcher)
    html = client.get(f"/runs/{queued.pk}/").content.decode()
    assert 'id="review-verdicts"' in html and "received" in html
    assert "review: task 1:t0 flagged by vic (bad gold)" in html  # the run's event list
    assert "raw agreement <strong>0.50</strong>" in html
    assert 'id="score-harness"' not in html  # not a SCORE run
    panel = client.get(f"/review/runs/{queued.pk}/panel/").content.decode()
    assert panel.startswith('<section class="card" id="review-verdicts"')


HARNESS = ('{"dimension_constraints": {"k": 2, "must_include": ["factuality"], "weight_min": 0.2, "weight_max": 0.5},'
           ' "process_constraints": {"require_gap_analysis": false, "require_verification": true,'
           ' "citation_cross_check": true, "min_number_of_tool_call": 1}, "notes": "cite sources"}')


def test_a_score_run_page_shows_the_harness_and_its_owner_edits_it(client, make_run, researcher, reviewer):
    run = make_run("score")
    RunEvent.objects.create(run=run, step=5, message="harness v1 (rules)", key="5:event1",
                            data={"harness": {"dimension_constraints": {"k": 5}, "notes": "from the recipe"},
                                  "version": 1, "driver": "rules"})
    client.force_login(reviewer)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Version 1 · rules · step 5" in html and "from the recipe" in html
    assert 'id="harness-text"' not in html  # not the run's owner
    assert client.post(f"/review/runs/{run.pk}/harness/", {"harness": HARNESS}).status_code == 403
    client.force_login(researcher)
    bad = client.post(f"/review/runs/{run.pk}/harness/", {"harness": '{"notes": 3}'}, HTTP_HX_REQUEST="true")
    assert 'id="harness-error"' in bad.content.decode() and "notes must be text" in bad.content.decode()
    ok = client.post(f"/review/runs/{run.pk}/harness/", {"harness": HARNESS}, HTTP_HX_REQUEST="true")
    assert 'id="harness-pending"' in ok.content.decode()
    assert DjangoSink(run).control().harness["notes"] == "cite sources"
    assert "handed to the recipe" in client.get(f"/runs/{run.pk}/").content.decode()


def test_an_item_of_a_deleted_run_still_shows_its_snapshot(client, queued, reviewer):
    grade = ReviewItem.objects.get(kind="grade", key="1:t0:a0:g0")
    grade.review(reviewer, "flag", reason="judge too lenient")
    number = queued.pk
    queued.delete()
    client.force_login(reviewer)
    html = client.get(f"/review/?item={grade.pk}&status=all").content.decode()
    assert f"run {number} (deleted)" in html and "judge too lenient" in html
    assert "Which year? &lt;script&gt;" in html and "States the year 1969." in html and "Grade 1.00" in html


def test_next_skips_ahead_and_wraps_around(client, queued, reviewer):
    client.force_login(reviewer)
    first, second = ReviewItem.objects.filter(run_number=queued.pk, kind="task").order_by("id")
    base = f"/review/?run={queued.pk}&kind=task"
    assert f'data-item="{second.pk}"' in client.get(f"{base}&after={first.pk}").content.decode()
    assert f'data-item="{first.pk}"' in client.get(f"{base}&after={second.pk}").content.decode()
    first.review(reviewer, "approve")  # the only pending one left is shown even when skipped past
    assert f'data-item="{second.pk}"' in client.get(f"{base}&after={second.pk}").content.decode()


def test_an_invalid_task_says_why_it_was_refused(client, run, reviewer):
    """A reviewer shown an invalid task (the demo's SmolLM2 writes mostly those) reads the gate's or the parser's
    reason, as the run page's samples give it, instead of a bare "invalid" over "(no question)"."""
    sink = DjangoSink(run)
    recs = records(1, n=1)
    recs[0].update(valid=False, question="", data={"invalid_reason": "task: no parsable JSON object"})
    sink.samples(1, recs)
    sink.control()
    client.force_login(reviewer)
    html = client.get(f"/review/?run={run.pk}&kind=task").content.decode()
    reason = html.split('id="task-invalid-reason">', 1)[1].split("</span>", 1)[0]
    assert reason == "task: no parsable JSON object" and "(no question)" in html
    valid = DjangoSink(run)
    valid.samples(2, records(2, n=1))
    valid.control()
    item = ReviewItem.objects.get(run=run, kind="task", step=2)
    page = client.get(f"/review/?item={item.pk}").content.decode()
    assert "Question 2-0: what year?" in page and 'id="task-invalid-reason"' not in page
