"""Review API: queue filters and pages, verdicts with 4xx JSON errors, agreement, harness edits,
and who may do what (reviewers review but cannot launch; researchers launch but cannot review)."""
import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from apps.review.models import ReviewItem
from apps.runs.sink import DjangoSink
from tests.web.review.conftest import records

pytestmark = pytest.mark.django_db


def client_for(user=None, token=False):
    client = APIClient()
    if user is not None and token:
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    elif user is not None:
        client.force_authenticate(user)
    return client


@pytest.fixture
def queued(run):
    sink = DjangoSink(run)
    sink.samples(1, records(1, n=3))
    sink.control()
    return run


def test_the_queue_filters_by_run_kind_and_status_and_pages(queued, make_run, reviewer):
    other = make_run(review={"tasks": 1.0, "rubrics": 0.0, "grades": 0.0})
    sink = DjangoSink(other)
    sink.samples(1, records(1, n=1))
    sink.control()
    api = client_for(reviewer, token=True)
    everything = api.get("/api/v1/review/queue/").json()
    assert everything["count"] == 3 * 3 + 1  # 3 tasks + 3 rubrics + 3 grades, and 1 task of the other run
    tasks = api.get(f"/api/v1/review/queue/?run={queued.pk}&kind=task&page_size=2").json()
    assert tasks["count"] == 3 and tasks["pages"] == 2 and len(tasks["results"]) == 2 and tasks["previous"] is None
    assert "page=2" in tasks["next"]
    second = api.get(tasks["next"]).json()
    assert [r["key"] for r in second["results"]] == ["1:t2"] and second["next"] is None
    first = tasks["results"][0]
    assert first["snapshot"]["question"] == "Question 1-0: what year?" and first["status"] == "pending"
    api.post(f"/api/v1/review/items/{first['id']}/", {"verdict": "flag", "reason": "wrong"}, format="json")
    assert api.get(f"/api/v1/review/queue/?run={queued.pk}&kind=task").json()["count"] == 2
    flagged = api.get("/api/v1/review/queue/?status=flagged").json()["results"]
    assert [(r["key"], r["reviewer"], r["reason"]) for r in flagged] == [("1:t0", "vic", "wrong")]
    assert api.get("/api/v1/review/queue/?status=all").json()["count"] == 10


@pytest.mark.parametrize("query, message", [
    ("kind=essay", "kind: unknown kind 'essay'"),
    ("status=done", "status: unknown status 'done'"),
    ("run=abc", "run: must be an integer"),
    ("page_size=0", "page_size: must be between 1 and 200"),
    ("valid=maybe", "valid: unknown value 'maybe'"),
    ("method=dpo", "method: unknown method 'dpo'"),
])
def test_bad_queue_filters_are_400_with_a_message(reviewer, query, message):
    response = client_for(reviewer).get(f"/api/v1/review/queue/?{query}")
    assert response.status_code == 400 and response.json()["error"].startswith(message)


def test_a_reviewer_approves_flags_and_edits(queued, reviewer):
    api = client_for(reviewer)
    rubric = ReviewItem.objects.get(kind="rubric", key="1:t0:r0")
    response = api.post(f"/api/v1/review/items/{rubric.pk}/", {"verdict": "approve", "edit": "Names 1969."}, format="json")
    assert response.status_code == 200
    assert response.json()["status"] == "approved" and response.json()["edit"] == "Names 1969."
    rubric.refresh_from_db()
    assert rubric.edit == "Names 1969." and rubric.reviewer_name == "vic" and rubric.applied_at is None


@pytest.mark.parametrize("body, message", [
    ({"verdict": "reject"}, "verdict must be 'approve' or 'flag', got 'reject'"),
    ({}, "verdict must be 'approve' or 'flag', got None"),
    ({"verdict": "approve", "edit": "x"}, 'a task edit is {"question"'),
    ({"verdict": "approve", "edit": {"question": " "}}, "the edited question is empty"),
    ({"verdict": "approve", "edit": {"question": "Q?", "hint": "x"}}, "a task edit has only question and answer"),
    ({"verdict": "flag", "reason": 5}, "reason must be text"),
    ({"verdict": "flag", "why": "x"}, "unknown field(s) ['why']"),
])
def test_bad_verdicts_are_400_json(queued, reviewer, body, message):
    task = ReviewItem.objects.get(kind="task", key="1:t0")
    response = client_for(reviewer).post(f"/api/v1/review/items/{task.pk}/", body, format="json")
    assert response.status_code == 400 and response.json()["error"].startswith(message)
    task.refresh_from_db()
    assert task.status == "pending"


def test_a_list_body_and_an_unknown_item_are_4xx(queued, reviewer):
    api = client_for(reviewer)
    task = ReviewItem.objects.get(kind="task", key="1:t0")
    assert api.post(f"/api/v1/review/items/{task.pk}/", ["flag"], format="json").status_code == 400
    missing = api.post("/api/v1/review/items/999999/", {"verdict": "flag"}, format="json")
    assert missing.status_code == 404 and "error" in missing.json()


def test_reviewing_needs_the_reviewer_role_or_admin(queued, researcher, reader, admin_user):
    task = ReviewItem.objects.get(kind="task", key="1:t0")
    url = f"/api/v1/review/items/{task.pk}/"
    for user in (researcher, reader):
        response = client_for(user).post(url, {"verdict": "flag"}, format="json")
        assert response.status_code == 403 and "reviewer role" in response.json()["error"]
    assert client_for(researcher).get("/api/v1/review/queue/").status_code == 200  # reading is open to everyone
    assert client_for(admin_user).post(url, {"verdict": "flag", "reason": "vague"}, format="json").status_code == 200


def test_a_flag_without_a_reason_is_refused(queued, reviewer):
    task = ReviewItem.objects.get(kind="task", key="1:t0")
    url = f"/api/v1/review/items/{task.pk}/"
    for body in ({"verdict": "flag"}, {"verdict": "flag", "reason": "   "}):
        response = client_for(reviewer).post(url, body, format="json")
        assert response.status_code == 400 and "a flag needs a reason" in response.json()["error"]
    task.refresh_from_db()
    assert task.status == "pending"
    assert client_for(reviewer).post(url, {"verdict": "approve"}, format="json").status_code == 200  # approving needs none


def test_anonymous_gets_401_or_403_and_never_reviews(queued):
    task = ReviewItem.objects.get(kind="task", key="1:t0")
    for method, url in [("get", "/api/v1/review/queue/"), ("post", f"/api/v1/review/items/{task.pk}/"),
                        ("get", f"/api/v1/review/agreement/?run={queued.pk}")]:
        response = getattr(APIClient(), method)(url, {"verdict": "flag"} if method == "post" else None, format="json")
        assert response.status_code in (401, 403) and "error" in response.json()
    task.refresh_from_db()
    assert task.status == "pending"


def test_reviewers_can_review_but_not_launch(reviewer, queued):
    response = client_for(reviewer).post("/api/v1/runs/", {"method": "spice", "model": "tiny", "corpus": "x"},
                                         format="json")
    assert response.status_code == 403 and "researcher role" in response.json()["error"]
    task = ReviewItem.objects.get(kind="task", key="1:t0")
    assert client_for(reviewer).post(f"/api/v1/review/items/{task.pk}/", {"verdict": "approve"},
                                     format="json").status_code == 200


def test_agreement_endpoint(queued, reviewer):
    api = client_for(reviewer)
    assert api.get("/api/v1/review/agreement/").json()["error"].startswith("run is required")
    for key, verdict in [("1:t0:a0:g0", "approve"), ("1:t1:a0:g0", "flag"), ("1:t2:a0:g0", "approve")]:
        ReviewItem.objects.get(kind="grade", key=key).review(reviewer, verdict, reason="judge too lenient")
    out = api.get(f"/api/v1/review/agreement/?run={queued.pk}").json()
    # judge passes all 3 (score 1.0); humans: pass, fail, pass -> agreement 2/3; p_e = 1 * 2/3 + 0 = 2/3;
    # kappa = (2/3 - 2/3) / (1/3) = 0
    assert out["overall"]["n"] == 3 and out["overall"]["agreement"] == pytest.approx(2 / 3)
    assert out["overall"]["kappa"] == pytest.approx(0.0)
    assert out["by_priority"]["critical"]["n"] == 3 and out["trend"][0]["n"] == 3
    assert api.get(f"/api/v1/review/agreement/?run={queued.pk}&bucket=x").status_code == 400


HARNESS = {
    "dimension_constraints": {"k": 3, "must_include": ["factuality"], "weight_min": 0.1, "weight_max": 0.6},
    "process_constraints": {"require_gap_analysis": True, "require_verification": True,
                            "citation_cross_check": False, "min_number_of_tool_call": 2},
    "notes": "Check every number against a source.",
}


def test_the_owner_edits_a_score_harness_and_others_cannot(make_run, researcher, reviewer):
    run = make_run("score")
    url = f"/api/v1/review/runs/{run.pk}/harness/"
    current = client_for(reviewer).get(url).json()
    assert current["source"] == "config" and current["harness"]["dimension_constraints"]["k"] == 4
    assert client_for(reviewer).post(url, {"harness": HARNESS}, format="json").status_code == 403
    bad = client_for(researcher).post(url, {"harness": {**HARNESS, "dimension_constraints": {
        "k": 99, "must_include": ["charm"], "weight_min": 0.7, "weight_max": 0.2}}}, format="json")
    assert bad.status_code == 400
    problems = bad.json()["problems"]
    assert any("k must be an integer from 1 to 7" in p for p in problems)
    assert any("['charm'] not in the dimension pool" in p for p in problems)
    assert any("weight_min 0.7 is larger than weight_max 0.2" in p for p in problems)
    assert client_for(researcher).post(url, {"harness": "{not json"}, format="json").json()["error"].startswith(
        "invalid harness: not valid JSON")
    saved = client_for(researcher).post(url, {"harness": HARNESS}, format="json")
    assert saved.status_code == 201 and saved.json()["pending_edit"] == HARNESS
    assert DjangoSink(run).control().harness == HARNESS


def test_only_score_runs_have_a_harness(run, researcher):
    response = client_for(researcher).get(f"/api/v1/review/runs/{run.pk}/harness/")
    assert response.status_code == 404 and "only SCORE runs" in response.json()["error"]


def test_a_harness_asking_more_searches_than_the_evaluator_may_make_is_refused(make_run, researcher):
    """The evaluator searches at most evaluator_max_turns - 1 = 3 times (issue 18): a minimum of 4 would
    zero every score through the depth rule, so the edit is refused and says why."""
    run = make_run("score")
    url = f"/api/v1/review/runs/{run.pk}/harness/"
    greedy = {**HARNESS, "process_constraints": {**HARNESS["process_constraints"], "min_number_of_tool_call": 4}}
    refused = client_for(researcher).post(url, {"harness": greedy}, format="json")
    assert refused.status_code == 400
    assert any("exceeds the evaluator's tool budget of 3 searches" in p for p in refused.json()["problems"])
    fits = {**HARNESS, "process_constraints": {**HARNESS["process_constraints"], "min_number_of_tool_call": 3}}
    assert client_for(researcher).post(url, {"harness": fits}, format="json").status_code == 201


def test_the_queue_filters_by_validity_role_and_method_with_valid_tasks_first(make_run, reviewer):
    spice = make_run(review={"tasks": 1.0, "rubrics": 0.0, "grades": 0.0})
    recs = records(1, n=3)
    recs[0]["valid"] = False  # the first task written is invalid: it goes after the valid ones
    sink = DjangoSink(spice)
    sink.samples(1, recs)
    sink.control()
    ssp = make_run("ssp", review={"tasks": 1.0, "rubrics": 0.0, "grades": 0.0})
    recs = records(1, n=1)
    recs[0]["role"] = "proposer"
    sink = DjangoSink(ssp)
    sink.samples(1, recs)
    sink.control()
    api = client_for(reviewer)

    def keys(query):
        return [(r["run"], r["key"]) for r in api.get(f"/api/v1/review/queue/?{query}").json()["results"]]

    assert keys(f"run={spice.pk}") == [(spice.pk, "1:t1"), (spice.pk, "1:t2"), (spice.pk, "1:t0")]  # valid first
    assert keys("valid=invalid") == [(spice.pk, "1:t0")]
    assert keys(f"valid=valid&run={spice.pk}") == [(spice.pk, "1:t1"), (spice.pk, "1:t2")]
    assert keys("role=proposer") == [(ssp.pk, "1:t0")]
    assert keys("method=ssp") == [(ssp.pk, "1:t0")]
    assert len(keys("method=spice&role=challenger")) == 3


def test_the_queue_page_walks_valid_items_first_then_invalid(make_run, reviewer):
    from django.test import Client

    run = make_run(review={"tasks": 1.0, "rubrics": 0.0, "grades": 0.0})
    recs = records(1, n=3)
    recs[0]["valid"] = False
    sink = DjangoSink(run)
    sink.samples(1, recs)
    sink.control()
    t0, t1, t2 = ReviewItem.objects.filter(run_number=run.pk).order_by("id")
    browser = Client()
    browser.force_login(reviewer)

    def shown(query):
        return browser.get(f"/review/?run={run.pk}&{query}").context["item"].pk

    assert shown("") == t1.pk
    assert shown(f"after={t1.pk}") == t2.pk
    assert shown(f"after={t2.pk}") == t0.pk  # the invalid one comes last
    assert shown(f"after={t0.pk}") == t1.pk  # and then it wraps around


def test_bulk_verdicts_are_all_or_none(queued, reviewer, researcher):
    api = client_for(reviewer)
    tasks = list(ReviewItem.objects.filter(kind="task").order_by("id"))
    ids = [t.pk for t in tasks[:2]]
    refused = api.post("/api/v1/review/bulk/", {"ids": ids, "verdict": "flag"}, format="json")
    assert refused.status_code == 400 and refused.json()["error"].startswith("a flag needs a reason")
    missing = api.post("/api/v1/review/bulk/", {"ids": [*ids, 999999], "verdict": "approve"}, format="json")
    assert missing.status_code == 400 and "no review item with id 999999" in missing.json()["error"]
    assert not ReviewItem.objects.exclude(status="pending").exists()  # nothing saved by either
    done = api.post("/api/v1/review/bulk/", {"ids": ids, "verdict": "flag", "reason": "off topic"}, format="json")
    assert done.status_code == 200 and done.json()["count"] == 2
    assert sorted(ReviewItem.objects.filter(status="flagged").values_list("pk", flat=True)) == ids
    assert set(ReviewItem.objects.filter(pk__in=ids).values_list("reason", flat=True)) == {"off topic"}
    bad = api.post("/api/v1/review/bulk/", {"ids": "1,2", "verdict": "approve"}, format="json")
    assert bad.status_code == 400 and "ids" in bad.json()["error"]
    assert client_for(researcher).post("/api/v1/review/bulk/", {"ids": ids, "verdict": "approve"},
                                       format="json").status_code == 403
