"""The papers' reward formulas against their check values (methods.md), arithmetic shown."""

import math

import pytest

from trainer.rewards import (
    SPICE_CHALLENGER_REWARDS,
    piplay_difficulty,
    piplay_examiner_reward,
    scope_challenger_reward,
    scope_f_diff,
    scope_format_parts,
    scope_format_reward,
    scope_length_penalty,
    scope_rubric_score,
    scope_search_reward,
    scope_solver_reward,
    score_consistency,
    score_solver_reward,
    spice_absolute_zero,
    spice_challenger,
    spice_reward_fn,
    spice_rzero_tent,
    spice_threshold,
    ssp_proposer,
    ssp_solver,
    tfidf_vectors,
)


def k_of_8(k):
    return [True] * k + [False] * (8 - k)


# ================================================================== SPICE


@pytest.mark.parametrize(
    "k, expected",
    [
        # p = 0:   p(1-p) = 0;        (0 - 0.25)^2 = 0.0625;       / 0.02 = 3.125;    e^-3.125 = 0.0439
        (0, 0.0439),
        # p = 1/8: p(1-p) = 0.109375; (-0.140625)^2 = 0.0197754;   / 0.02 = 0.98877;  e^-0.98877 = 0.3720
        (1, 0.3720),
        # p = 1/4: p(1-p) = 0.1875;   (-0.0625)^2 = 0.00390625;    / 0.02 = 0.19531;  e^-0.19531 = 0.8226
        (2, 0.8226),
        # p = 3/8: p(1-p) = 0.234375; (-0.015625)^2 = 0.00024414;  / 0.02 = 0.012207; e^-0.012207 = 0.9879
        (3, 0.9879),
        # p = 1/2: p(1-p) = 0.25 -> exponent 0 -> 1.0
        (4, 1.0),
        # symmetric: p and 1-p give the same variance
        (5, 0.9879),
        (6, 0.8226),
        (7, 0.3720),
        (8, 0.0439),
    ],
)
def test_spice_challenger_matches_the_paper_table(k, expected):
    assert spice_challenger(k_of_8(k)) == pytest.approx(expected, abs=5e-5)


def test_spice_gives_an_invalid_task_minus_one_tenth():
    assert spice_challenger(None) == -0.1
    for fn in (spice_absolute_zero, spice_threshold, spice_rzero_tent):
        assert fn(None) == -0.1
    assert spice_challenger(None, invalid=-0.5) == -0.5


def test_spice_ablations_by_hand():
    # absolute zero: 1 - p inside (0, 1): k=2 -> 1 - 0.25 = 0.75; k=0 and k=8 -> 0
    assert [spice_absolute_zero(k_of_8(k)) for k in (0, 2, 8)] == [0.0, 0.75, 0.0]
    # threshold: 1 iff 0 < k < 8
    assert [spice_threshold(k_of_8(k)) for k in (0, 1, 7, 8)] == [0.0, 1.0, 1.0, 0.0]
    # r-zero tent: 1 - 2|p - 0.5|: k=2 -> 1 - 2 * 0.25 = 0.5; k=4 -> 1; k=0 -> 0
    assert [spice_rzero_tent(k_of_8(k)) for k in (0, 2, 4)] == [0.0, 0.5, 1.0]


def test_spice_rewards_are_chosen_by_name_with_bound_parameters():
    assert set(SPICE_CHALLENGER_REWARDS) == {"gaussian", "absolute_zero", "threshold", "r_zero"}
    assert spice_reward_fn("r_zero")(k_of_8(2)) == pytest.approx(0.5)
    assert spice_reward_fn("threshold", invalid=-1.0)(None) == -1.0
    # wider gaussian, tau = 0.02: p = 0 -> e^(-0.0625 / 0.04) = e^-1.5625 = 0.2096
    assert spice_reward_fn("gaussian", tau=0.02)(k_of_8(0)) == pytest.approx(0.2096, abs=5e-5)
    with pytest.raises(ValueError, match="choose one of"):
        spice_reward_fn("variance")


def test_spice_rejects_a_valid_task_without_answers():
    with pytest.raises(ValueError, match="at least one"):
        spice_challenger([])


# ================================================================== SSP


def test_ssp_proposer_is_one_minus_the_solver_pass_rate():
    # 2 of 5 solved -> 1 - 0.4 = 0.6
    assert ssp_proposer([1, 0, 0, 1, 0]) == pytest.approx(0.6)
    assert ssp_proposer([1, 1, 1, 1, 1]) == 0.0
    # filtered question: 0, not a negative penalty (-0.1 collapsed training)
    assert ssp_proposer(None) == 0.0
    with pytest.raises(ValueError, match="at least one attempt"):
        ssp_proposer([])


def test_ssp_solver_quarters_the_reward_above_ten_answer_tags():
    assert ssp_solver(True, n_answer_tags=1) == 1.0
    assert ssp_solver(True, n_answer_tags=10) == 1.0
    assert ssp_solver(True, n_answer_tags=11) == 0.25
    assert ssp_solver(False, n_answer_tags=11) == 0.0


# ================================================================== SCOPE


def test_scope_f_diff_check_values():
    # max(0, 1 - |g - 0.5| / 0.5)
    assert scope_f_diff(0.5) == 1.0
    assert scope_f_diff(0.25) == pytest.approx(0.5)  # 1 - 0.25 / 0.5
    assert scope_f_diff(0.0) == 0.0
    assert scope_f_diff(1.0) == 0.0
    # tau = 0.3: min(tau, 1 - tau) = 0.3; g = 0.45 -> 1 - 0.15 / 0.3 = 0.5; g = 0.6 -> 0
    assert scope_f_diff(0.45, tau=0.3) == pytest.approx(0.5)
    assert scope_f_diff(0.6, tau=0.3) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="strictly between"):
        scope_f_diff(0.5, tau=1.0)


def test_scope_length_penalty_check_values():
    assert scope_length_penalty(0) == 1.0
    assert scope_length_penalty(1024) == 1.0
    # 0.05 + 0.475 * (1 + cos(pi * 512 / 1024)) = 0.05 + 0.475 * (1 + 0) = 0.525
    assert scope_length_penalty(1536) == pytest.approx(0.525)
    # 0.05 + 0.475 * (1 + cos(pi / 4)) = 0.05 + 0.475 * 1.707107 = 0.860876
    assert scope_length_penalty(1280) == pytest.approx(0.860876, abs=1e-6)
    assert scope_length_penalty(2048) == pytest.approx(0.05)
    assert scope_length_penalty(10_000) == pytest.approx(0.05)
    # continuous at both ends: just inside the window equals the plateau values
    assert scope_length_penalty(1025) == pytest.approx(1.0, abs=1e-5)
    assert scope_length_penalty(2047) == pytest.approx(0.05, abs=1e-5)
    with pytest.raises(ValueError, match="greater than"):
        scope_length_penalty(10, soft=100, hard=100)


CHALLENGER_TURNS = [
    "<think>plan</think><search>Eiffel tower height</search>",
    "<search>   </search>",  # empty query: not a valid search, and no think block
    "<think>ok</think><task><question>Explain why the tower was built.</question></task>",
]
SOLVER_TURNS = [
    "<think>a</think><search>q1</search>",
    "<think>b</think><search>q2</search><search>q3</search>",
    "<think>c</think><answer>It was built for the 1889 fair.</answer>",
]


def test_scope_challenger_format_parts():
    # think: 2 of 3 turns; tool: 1 turn with a valid search / 2 expected = 0.5; structure: 1
    parts = scope_format_parts(CHALLENGER_TURNS, "challenger", expected_searches=2)
    assert parts == pytest.approx({"think": 2 / 3, "tool": 0.5, "structure": 1.0})
    # r_fmt = (0.666667 + 0.5 + 1) / 3 = 0.722222
    assert scope_format_reward(CHALLENGER_TURNS, "challenger", 2) == pytest.approx(0.722222, abs=1e-6)
    # a task without <question> is not well-formed; search turns above expected cap at 1
    parts = scope_format_parts(["<search>a</search>", "<task>do it</task>"], "challenger", expected_searches=1)
    assert parts == pytest.approx({"think": 0.0, "tool": 1.0, "structure": 0.0})


def test_scope_solver_format_parts():
    # think 3/3; tool: 3 searches in the 2 non-final turns / 2 -> 1.5, capped at 1; answer 1
    assert scope_format_parts(SOLVER_TURNS, "solver") == pytest.approx({"think": 1.0, "tool": 1.0, "answer": 1.0})
    # one direct answer: no think, no non-final turn (tool 0), answer 1 -> 1/3
    assert scope_format_reward(["<answer>x</answer>"], "solver") == pytest.approx(1 / 3)
    assert scope_format_reward([], "solver") == 0.0
    with pytest.raises(ValueError, match="choose one of"):
        scope_format_reward(SOLVER_TURNS, "judge")


def test_scope_search_and_rubric_scores():
    assert scope_search_reward(2) == pytest.approx(2 / 3)
    assert scope_search_reward(7) == 1.0
    assert scope_rubric_score([True, False, True, True]) == 0.75


def test_scope_challenger_reward_by_hand():
    r_fmt = 0.722222
    # gate passed, mean g = 0.25: 0.5 * 0.722222 + 1.0 * f_diff(0.25) = 0.361111 + 0.5 = 0.861111
    assert scope_challenger_reward(r_fmt, True, 0.25) == pytest.approx(0.861111, abs=1e-6)
    # gate failed: 0.5 * r_fmt (ours) or r_fmt (paper's algorithm box)
    assert scope_challenger_reward(r_fmt, False, None) == pytest.approx(0.361111, abs=1e-6)
    assert scope_challenger_reward(r_fmt, False, None, gate_failure="format") == pytest.approx(r_fmt)
    # r_fmt = 0: zero total reward (paper F.1), even with a perfect difficulty
    assert scope_challenger_reward(0.0, True, 0.5) == 0.0
    with pytest.raises(ValueError, match="mean rubric score"):
        scope_challenger_reward(r_fmt, True, None)


def test_scope_solver_reward_by_hand():
    # g = 0.6, 1536 tokens (L = 0.525), r_fmt = 1, 2 searches:
    # 1.0 * 0.525 * 0.6 + 0.5 * 1 + 0.1 * 2/3 = 0.315 + 0.5 + 0.066667 = 0.881667
    assert scope_solver_reward(0.6, 1536, 1.0, 2) == pytest.approx(0.881667, abs=1e-6)
    # short answer, no format, no search: just g
    assert scope_solver_reward(0.6, 100, 0.0, 0) == pytest.approx(0.6)


# ================================================================== SCORE


def test_grounded_share_by_hand():
    from trainer.rewards import grounded_share

    passages = ["Doc 1 (Title: Timbuktu) Timbuktu is an ancient city in Mali, situated 20 kilometres north of the "
                "Niger River. It had a population of around 32,000 in the 2009 census."]
    report = ("Timbuktu is an ancient city in Mali, north of the Niger River.\n"   # supported: all 7 content words 
              "Timbuktu had around 32,000 people in the 2009 census.\n"           # 5 of 6 (people: no) >= 0.7: supported
              "Timbuktu had around 54,000 people in the 2009 census.\n"           # a number the passage never gives
              "It is known for its unique culture and rich architecture.\n"       # generic: 0 of 5 words
              "See above.")                                                        # under 4 content words: not read
    assert grounded_share(report, passages) == (pytest.approx(2 / 4), 4)
    # a stricter overlap drops the paraphrase (5 of 6 < 0.9); no passages: nothing supported; no report: 0 read
    assert grounded_share(report, passages, min_overlap=0.9) == (pytest.approx(1 / 4), 4)
    assert grounded_share(report, []) == (0.0, 4)
    assert grounded_share("", passages) == (0.0, 0) and grounded_share(None, passages) == (0.0, 0)
    assert grounded_share(42, passages) == (0.0, 0) and grounded_share(report, None) == (0.0, 4)
    # a number is read whole: "1.4 million" is not in a passage that says "4 million", whose search result's own
    # "Doc 1" header is not a number of the passage either
    result = ["Doc 1 (Title: Prague) Prague, the capital of the Czech Republic, has about 4 million people nearby."]
    assert grounded_share("Prague, the capital of the Czech Republic, has about 1.4 million people.", result)[0] == 0.0
    assert grounded_share("Prague, the capital of the Czech Republic, has about 4 million people.", result)[0] == 1.0


def test_score_solver_reward_by_hand():
    # 1 + 0.5 * 8 + 0.3 * 6 + 0.2 * 10 = 1 + 4 + 1.8 + 2 = 8.8
    assert score_solver_reward(True, [0.5, 0.3, 0.2], [8, 6, 10]) == pytest.approx(8.8)
    assert score_solver_reward(False, [0.5, 0.3, 0.2], [8, 6, 10]) == 0.0
    with pytest.raises(ValueError, match="one score per rubric dimension"):
        score_solver_reward(True, [0.5], [1, 2])


def test_score_consistency_is_one_for_identical_and_zero_for_disjoint_texts():
    assert score_consistency(["The cat sat.", "the CAT sat", "The cat, sat!"]) == pytest.approx(1.0)
    assert score_consistency(["alpha beta", "gamma delta", "epsilon zeta"]) == 0.0


def test_score_consistency_by_hand():
    # "a b" vs "a c", K = 2: df(a) = 2, df(b) = df(c) = 1
    # idf(a) = ln(3/3) + 1 = 1 ; idf(b) = idf(c) = ln(3/2) + 1 = 1.405465
    # cos = (1 * 1) / (1 + 1.405465^2) = 1 / 2.975332 = 0.336097
    assert score_consistency(["a b", "a c"]) == pytest.approx(0.336097, abs=1e-6)
    # three reports, pairs (1,2) = 1, (1,3) = 0, (2,3) = 0 -> mean 1/3
    assert score_consistency(["x y", "x y", "z"]) == pytest.approx(1 / 3)
    # an empty conclusion agrees with nothing
    assert score_consistency(["", ""]) == 0.0


def test_score_consistency_orders_more_agreeing_report_sets_higher():
    agree = ["Solar power is the cheapest new energy source.", "Solar power is now the cheapest energy source.",
             "The cheapest new energy source is solar power."]
    partial = ["Solar power is the cheapest new energy source.", "Wind power is the cheapest energy source.",
               "Nuclear energy remains expensive to build."]
    disagree = ["Solar panels are cheap.", "Glaciers retreat quickly.", "Markets fell on Tuesday."]
    c_agree, c_partial, c_disagree = map(score_consistency, (agree, partial, disagree))
    assert c_agree > c_partial > c_disagree >= 0.0
    assert score_consistency(agree[::-1]) == pytest.approx(c_agree)  # order of reports is irrelevant


def test_tfidf_rows_are_unit_length():
    x = tfidf_vectors(["one two two", "two three", ""])
    assert x.shape == (3, 3)
    assert math.isclose(float((x[0] ** 2).sum()), 1.0) and float((x[2] ** 2).sum()) == 0.0


def test_score_consistency_needs_two_reports():
    with pytest.raises(ValueError, match="at least 2"):
        score_consistency(["only one"])


# ================================================================== pi-Play


@pytest.mark.parametrize(
    "k, expected",
    [
        (0, 0.0),  # nobody solved it: too hard
        (1, 1.0),  # (5 - 1) / 4
        (2, 0.75),  # (5 - 2) / 4
        (3, 0.5),  # (5 - 3) / 4
        (4, 0.25),  # (5 - 4) / 4
        (5, 0.0),  # everybody solved it: trivial
    ],
)
def test_piplay_difficulty_matches_the_table(k, expected):
    assert piplay_difficulty(k, 5) == pytest.approx(expected)


def test_piplay_examiner_reward_adds_half_the_format_reward():
    # r_d(2 of 5) = 0.75; + 0.5 * 0.8 = 1.15
    assert piplay_examiner_reward(2, 5, r_fmt=0.8) == pytest.approx(1.15)
    with pytest.raises(ValueError, match="0 <= k <= n"):
        piplay_difficulty(6, 5)
