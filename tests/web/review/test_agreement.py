"""Judge-human agreement: Cohen's kappa on hand-computed tables, and per run / priority / steps."""
import pytest

from apps.review.agreement import cohen_kappa, human_pass, run_agreement
from apps.review.models import ReviewItem


def _pairs(both_pass, judge_only, human_only, both_fail):
    return ([(True, True)] * both_pass + [(True, False)] * judge_only + [(False, True)] * human_only
            + [(False, False)] * both_fail)


def test_kappa_of_a_known_table():
    # judge pass / human pass 20, judge pass / human fail 5, judge fail / human pass 10, both fail 15; n = 50
    # p_o = (20 + 15) / 50 = 0.7
    # judge pass rate = 25 / 50 = 0.5, human pass rate = 30 / 50 = 0.6
    # p_e = 0.5 * 0.6 + 0.5 * 0.4 = 0.3 + 0.2 = 0.5
    # kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4
    out = cohen_kappa(_pairs(20, 5, 10, 15))
    assert out["n"] == 50 and out["agreement"] == pytest.approx(0.7) and out["kappa"] == pytest.approx(0.4)
    assert out["table"] == {"both_pass": 20, "both_fail": 15, "judge_pass_human_fail": 5, "judge_fail_human_pass": 10}


def test_kappa_edge_cases():
    # perfect agreement with both labels present: p_o = 1, p_e = 0.5 * 0.5 * 2 = 0.5 -> kappa = 1
    assert cohen_kappa(_pairs(3, 0, 0, 3))["kappa"] == pytest.approx(1.0)
    # always the opposite: p_o = 0, rates 0.5 / 0.5, p_e = 0.5 -> kappa = (0 - 0.5) / 0.5 = -1
    assert cohen_kappa(_pairs(0, 4, 4, 0))["kappa"] == pytest.approx(-1.0)
    # everyone always passes: p_e = 1 -> kappa undefined, agreement 1
    only_pass = cohen_kappa(_pairs(5, 0, 0, 0))
    assert only_pass["kappa"] is None and only_pass["agreement"] == 1.0
    assert cohen_kappa([])["agreement"] is None


def test_the_human_label_follows_the_verdict():
    assert human_pass(True, "approved") is True and human_pass(True, "flagged") is False
    assert human_pass(False, "approved") is False and human_pass(False, "flagged") is True


@pytest.mark.django_db
def test_run_agreement_overall_per_priority_and_over_steps(run, reviewer):
    # (step, priority, judge score, status) -> (judge pass, human pass)
    rows = [
        (1, "critical", 1.0, "approved"),   # (T, T)
        (2, "critical", 0.0, "approved"),   # (F, F)
        (3, "critical", 1.0, "flagged"),    # (T, F)
        (12, "bonus", 0.0, "flagged"),      # (F, T)
        (15, "bonus", 0.9, "approved"),     # (T, T)
        (19, "", 0.2, "approved"),          # (F, F), no rubric: "overall"
        (19, "", 0.2, "pending"),           # not reviewed: left out
    ]
    for i, (step, priority, score, status) in enumerate(rows):
        ReviewItem.objects.create(run=run, run_number=run.pk, kind="grade", key=f"g{i}", step=step, priority=priority,
                                  judge_score=score, status=status)
    out = run_agreement(run.pk)
    # overall: n = 6, agree 4 -> 0.6667; judge pass 3/6, human pass 3/6; p_e = 0.5; kappa = (2/3 - 1/2) / (1/2) = 1/3
    assert out["overall"]["n"] == 6 and out["overall"]["agreement"] == pytest.approx(4 / 6)
    assert out["overall"]["kappa"] == pytest.approx(1 / 3)
    # critical: (T,T) (F,F) (T,F): p_o = 2/3; judge 2/3, human 1/3; p_e = 2/9 + 2/9 = 4/9; kappa = (6/9-4/9)/(5/9) = 0.4
    assert list(out["by_priority"]) == ["critical", "bonus", "overall"]
    assert out["by_priority"]["critical"]["kappa"] == pytest.approx(0.4)
    assert out["by_priority"]["bonus"]["agreement"] == pytest.approx(0.5)
    # steps up to 19 -> bucket size ceil(20 / 10) = 2: buckets 0-1, 2-3, 12-13, 14-15, 18-19
    assert out["bucket"] == 2
    assert [(b["from_step"], b["n"]) for b in out["trend"]] == [(0, 1), (2, 2), (12, 1), (14, 1), (18, 1)]
    wide = run_agreement(run.pk, bucket=10)
    assert [(b["from_step"], b["to_step"], b["n"], round(b["agreement"], 3)) for b in wide["trend"]] == [
        (0, 9, 3, 0.667), (10, 19, 3, 0.667)]
