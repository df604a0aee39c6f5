"""SCORE: rubric sampling under the harness, strict score parsing, solver reward, depth rule,
conclusions, and the meta-harness drivers."""

import json
import random

import pytest

from trainer.method_configs import ScoreSection
from trainer.methods.harness import (
    EndpointDriver,
    HarnessError,
    HarnessStats,
    HumanDriver,
    RuleDriver,
    apply_human_edit,
    default_harness,
    normalize_harness,
    summarize,
)
from trainer.methods.score_prompts import (
    constrain_rubric,
    depth_rule,
    evaluation_messages,
    extract_conclusion,
    parse_rubric,
    parse_scores,
    report_is_valid,
    rubric_messages,
)
from trainer.rewards import score_solver_reward

POOL = ["factuality", "insight", "coherence", "complexity", "comprehensiveness", "citation", "readability"]


def _harness(k=4, must=("factuality",), wmin=0.1, wmax=0.5, tools=1):
    return normalize_harness({
        "dimension_constraints": {"k": k, "must_include": list(must), "weight_min": wmin, "weight_max": wmax},
        "process_constraints": {"require_gap_analysis": False, "require_verification": True,
                                "citation_cross_check": False, "min_number_of_tool_call": tools},
        "notes": ""}, POOL)


def test_a_followed_rubric_is_kept_as_written():
    text = ('<dimensions><dim name="factuality"/><dim name="insight" weight="0.3"/>'
            '<dim name="Coherence" weight="0.2"/><dim name="citation" weight="0.5"/></dimensions>')
    rubric = constrain_rubric(parse_rubric(text), _harness(), POOL, random.Random(0))
    assert rubric.followed and rubric.problems == []
    assert rubric.dims == [("factuality", 0.5), ("insight", 0.3), ("coherence", 0.2), ("citation", 0.5)]


@pytest.mark.parametrize("seed", range(20))
def test_any_output_becomes_a_rubric_within_the_harness_constraints(seed):
    rng = random.Random(seed)
    harness = _harness(k=rng.randint(2, 5), must=rng.sample(POOL, 1), wmin=0.2, wmax=0.4)
    garbage = [
        "", "no xml at all", '<dimensions><dim name="made_up" weight="9"/></dimensions>',
        '<dimensions><dim name="insight" weight="7"/><dim name="insight" weight="0.3"/>'
        '<dim name="readability"/><dim name="citation" weight="-1"/><dim name="coherence" weight="x"/>'
        '<dim name="complexity" weight="0.3"/><dim name="comprehensiveness" weight="0.3"/></dimensions>',
    ]
    for text in garbage:
        rubric = constrain_rubric(parse_rubric(text), harness, POOL, rng)
        names = [d for d, _ in rubric.dims]
        dc = harness["dimension_constraints"]
        assert len(names) == dc["k"] and len(set(names)) == dc["k"]
        assert names[0] == dc["must_include"][0] and set(names) <= set(POOL)
        assert all(0.2 <= w <= 0.4 for d, w in rubric.dims[1:])
        assert not rubric.followed and rubric.problems


def test_out_of_range_weights_are_clamped_and_reported():
    text = '<dimensions><dim name="insight" weight="0.9"/><dim name="citation" weight="0.01"/></dimensions>'
    rubric = constrain_rubric(parse_rubric(text), _harness(k=3), POOL, random.Random(0))
    assert rubric.dims == [("factuality", 0.5), ("insight", 0.5), ("citation", 0.1)]
    assert len(rubric.problems) == 2


def test_scores_are_read_strictly():
    text = ('<verification>checked</verification><scores><score dim="factuality" value="8" reason="ok"/>'
            '<score dim="insight" value="11"/><score dim="coherence" value="seven"/></scores>')
    s = parse_scores(text, ["factuality", "insight", "coherence", "citation"], scale=10)
    assert s.values == {"factuality": 0.8, "insight": 0.0, "coherence": 0.0, "citation": 0.0}
    assert s.missing == ["insight", "coherence", "citation"] and not s.well_formed
    broken = parse_scores("I think it is a 7/10 report.", ["factuality"], 10)
    assert broken.values == {"factuality": 0.0} and broken.missing == ["factuality"]
    # the score elements without their <scores> wrapper (as Qwen2.5-Coder-1.5B wrote 2 of 16): read all the same
    for unwrapped in ('<score dim="factuality" value="6"/>\n<score dim="insight" value="7"/>\n</scores>',
                      '<score dim="factuality" value="6"/><score dim="insight" value="7"/><gap_analysis>x</gap_analysis>'):
        s = parse_scores(unwrapped, ["factuality", "insight"], 10)
        assert s.values == {"factuality": 0.6, "insight": 0.7} and s.well_formed
    # a <scores> block opened and then cut by the budget is not read around: its scores are missing
    assert not parse_scores('<scores><score dim="insight" value="9"/>', ["insight"], 10).well_formed
    # a whole <scores> block is what counts when there is one
    assert parse_scores('<score dim="insight" value="9"/><scores><score dim="insight" value="2"/></scores>',
                        ["insight"], 10).values == {"insight": 0.2}


def test_solver_reward_and_depth_rule_match_the_formula():
    rubric = [("factuality", 0.5), ("insight", 0.3), ("citation", 0.2)]
    scores = {"factuality": 0.8, "insight": 0.5, "citation": 1.0}
    # 1 + 0.5*0.8 + 0.3*0.5 + 0.2*1.0 = 1 + 0.4 + 0.15 + 0.2 = 1.75
    weights, values = [w for _, w in rubric], [scores[d] for d, _ in rubric]
    assert score_solver_reward(True, weights, values) == pytest.approx(1.75)
    assert score_solver_reward(False, weights, values) == 0.0
    assert depth_rule(1.75, evaluator_searches=0, min_searches=1) == 0.0
    assert depth_rule(1.75, evaluator_searches=2, min_searches=2) == 1.75
    assert report_is_valid("A report.", truncated=False)
    assert not report_is_valid("A report.", truncated=True) and not report_is_valid(None, False)


def test_the_conclusion_is_the_labelled_part_or_the_last_paragraph():
    report = "Intro text.\n\n## Conclusion\nTexas law allows force only at night."
    assert extract_conclusion(report) == "Texas law allows force only at night."
    assert extract_conclusion("A.\n\nConclusion: it depends on context.") == "it depends on context."
    assert extract_conclusion("First part.\n\nLast paragraph here.") == "Last paragraph here."
    assert extract_conclusion("") == ""


def test_prompts_carry_the_harness():
    h = _harness(k=3, must=("citation",), tools=2)
    h["process_constraints"]["require_gap_analysis"] = True
    system = rubric_messages(h, POOL, ["Q1?"])[0]["content"]
    assert "citation is always required" in system and "exactly 2 more" in system and "[0.1, 0.5]" in system
    # the answer format spells out every line: the required one, then one weighted placeholder per dimension to
    # choose (one placeholder line was read as "list dimensions like this": benchmarks/score_rubric_probe.py)
    block = system.split("<dimensions>\n")[-1].split("\n</dimensions>")[0].splitlines()
    assert block == ['<dim name="citation"/>',
                     '<dim name="[1st chosen dimension]" weight="[a number from 0.1 to 0.5]"/>',
                     '<dim name="[2nd chosen dimension]" weight="[a number from 0.1 to 0.5]"/>']
    assert "Write 3 <dim> lines in all" in system
    msgs = evaluation_messages(h, [("citation", 0.5), ("insight", 0.2)], "Q1?", "Report.", 10)
    assert "at least 2 time(s)" in msgs[0]["content"] and "gaps the report does not cover" in msgs[0]["content"]
    # one score line per rubric dimension, and a reply that starts with a search even when none is required
    assert '<scores>\n<score dim="citation" value="[0-10]"/>\n<score dim="insight" value="[0-10]"/>\n</scores>' \
        in msgs[0]["content"]
    h["process_constraints"]["min_number_of_tool_call"] = 0
    none_required = evaluation_messages(h, [("citation", 0.5)], "Q1?", "Report.", 10)[0]["content"]
    assert "at least 0" not in none_required and "First pick a key claim" in none_required
    one_turn = evaluation_messages(h, [("citation", 0.5)], "Q1?", "Report.", 10, can_search=False)[0]["content"]
    assert "<search>" not in one_turn and '<score dim="citation" value="[0-10]"/>' in one_turn
    from trainer.methods.score_prompts import rubric_format_lines
    lines = rubric_format_lines([], 23, 0.1, 0.5).splitlines()
    assert [line.split("[")[1].split(" ")[0] for line in lines][:4] == ["1st", "2nd", "3rd", "4th"]
    assert [line.split("[")[1].split(" ")[0] for line in lines][10:13] == ["11th", "12th", "13th"]
    assert [line.split("[")[1].split(" ")[0] for line in lines][20:23] == ["21st", "22nd", "23rd"]
    assert "<report>Report.</report>" in msgs[1]["content"]


# --- harness ---------------------------------------------------------------------------------

def test_the_default_harness_comes_from_the_config_section():
    h = default_harness(ScoreSection())
    assert normalize_harness(h, POOL) == h
    assert h["process_constraints"]["min_number_of_tool_call"] == ScoreSection().min_verification_searches


def test_a_bad_harness_lists_every_problem():
    with pytest.raises(HarnessError) as err:
        normalize_harness({"dimension_constraints": {"k": 99, "must_include": ["nope"], "weight_min": 0.6,
                                                     "weight_max": 0.2},
                           "process_constraints": {"min_number_of_tool_call": -1, "require_verification": "yes"}},
                          POOL)
    text = str(err.value)
    for part in ("not in the dimension pool", "k must be an integer", "weight_min 0.6 is larger",
                 "min_number_of_tool_call must be", "require_verification must be true or false"):
        assert part in text
    with pytest.raises(HarnessError, match="not valid JSON"):
        normalize_harness("{oops", POOL)


def test_rule_driver_lowers_the_search_minimum_when_the_depth_rule_zeroes_most_scores():
    h = _harness(tools=2)
    update = RuleDriver(POOL, 10).next(h, HarnessStats(depth_zeroed_rate=0.8, depth_zeroed_of_valid=0.8,
                                                       valid_report_rate=1.0, evaluator_searches=0.5))
    assert update.changed and update.harness["process_constraints"]["min_number_of_tool_call"] == 1
    assert "depth rule" in update.reason
    assert h["process_constraints"]["min_number_of_tool_call"] == 2  # the current harness is not mutated


def test_rule_driver_counts_zeroed_scores_among_valid_reports():
    """Qwen2.5-Coder-1.5B on an H200 (RESULTS.md, SCORE vs its control): 13% of reports valid, every one of them
    zeroed by the depth rule (the evaluator searched 0.05 times a report against a minimum of 1), so the share of
    all reports was 13% and the old rule never fired: 14 steps with every group's rewards equal."""
    window = [{"step": s, "valid_report_rate": 0.13, "depth_zeroed_rate": 0.13, "depth_zeroed_of_valid": 1.0,
               "evaluator_searches": 0.05, "evaluator_truncated_rate": 0.016} for s in range(1, 6)]
    update = RuleDriver(POOL, 10).next(_harness(tools=1), summarize(window))
    assert update.harness["process_constraints"]["min_number_of_tool_call"] == 0
    assert update.reason.startswith("100% of valid reports' scores fell to the depth rule")
    # a few zeroed scores among many valid reports leave the minimum alone
    quiet = dict(window[0], valid_report_rate=0.9, depth_zeroed_rate=0.13, depth_zeroed_of_valid=0.14)
    assert not RuleDriver(POOL, 10).next(_harness(tools=1), summarize([quiet])).changed


def test_steps_without_a_valid_report_do_not_dilute_the_zeroed_share():
    """Valid reports are rare (the 1.5B's control: 0-7% a step), so some steps of the window have none; every valid
    report of the window was zeroed. A mean of per-step shares (0 on the steps with none) read 40% and kept the
    minimum; pooled over the window's reports the share is 100%."""
    rates = [0.0, 0.0, 0.05, 0.0, 0.03]
    window = [{"step": s, "valid_report_rate": v, "depth_zeroed_rate": v, "depth_zeroed_of_valid": 1.0 if v else 0.0,
               "evaluator_searches": 0.05} for s, v in enumerate(rates, start=1)]
    stats = summarize(window)
    assert stats.depth_zeroed_of_valid == pytest.approx(1.0)
    update = RuleDriver(POOL, 10).next(_harness(tools=1), stats)
    assert update.harness["process_constraints"]["min_number_of_tool_call"] == 0
    half = [dict(window[2], depth_zeroed_rate=0.025), dict(window[3])]  # half the valid reports of one step zeroed
    assert summarize(half).depth_zeroed_of_valid == pytest.approx(0.5)
    assert summarize([dict(window[0])]).depth_zeroed_of_valid == 0.0  # no valid report: nothing zeroed among them


def test_rule_driver_raises_the_minimum_when_the_evaluator_searches_comfortably():
    update = RuleDriver(POOL, 10).next(_harness(tools=1), HarnessStats(depth_zeroed_of_valid=0.0, evaluator_searches=3))
    assert update.harness["process_constraints"]["min_number_of_tool_call"] == 2


def test_rule_driver_makes_the_weakest_dimension_mandatory_when_scores_saturate():
    stats = HarnessStats(valid_report_rate=1.0, evaluator_searches=1, depth_zeroed_of_valid=0.2,
                         dimension_means={"factuality": 0.9, "insight": 0.3, "coherence": 0.95})
    update = RuleDriver(POOL, 10).next(_harness(), stats)
    assert update.harness["dimension_constraints"]["must_include"] == ["factuality", "insight"]


def test_rule_driver_reacts_to_consistency_hacking_and_format_failures():
    stats = HarnessStats(consistency=0.95, solver_reward=1.1, eval_format_failures=0.5, evaluator_searches=1,
                         depth_zeroed_of_valid=0.2)
    h = RuleDriver(POOL, 10).next(_harness(k=3), stats).harness
    assert h["process_constraints"]["require_gap_analysis"] and h["dimension_constraints"]["k"] == 4
    assert "broke the output format" in h["notes"]


def test_rule_driver_changes_nothing_on_quiet_statistics():
    stats = HarnessStats(depth_zeroed_of_valid=0.3, evaluator_searches=1.2, consistency=0.5, solver_reward=1.5)
    update = RuleDriver(POOL, 10).next(_harness(), stats)
    assert not update.changed and update.reason == "no rule fired"


def test_summarize_averages_the_window():
    stats = summarize([{"step": 4, "solver_reward": 1.0, "dimension_means": {"insight": 0.2}},
                       {"step": 5, "solver_reward": 2.0, "dimension_means": {"insight": 0.4}}])
    assert stats.solver_reward == 1.5 and stats.dimension_means == {"insight": pytest.approx(0.3)}
    assert stats.steps == [4, 5] and stats.dimension_counts == {"insight": 2}


def test_endpoint_driver_accepts_a_valid_reply_and_keeps_the_harness_otherwise():
    wanted = _harness(k=5, must=("citation",), tools=3)
    seen = []

    def chat(messages):
        seen.append(messages)
        return "Here is the harness:\n```json\n" + json.dumps(wanted) + "\n```"

    driver = EndpointDriver(chat, POOL, 10)
    update = driver.next(_harness(), HarnessStats(solver_reward=1.2))
    assert update.changed and update.harness == wanted and update.driver == "endpoint"
    assert "solver_reward" in seen[0][1]["content"] and "Do not pick" in seen[0][0]["content"]
    bad = EndpointDriver(lambda m: "I would raise k.", POOL, 10).next(_harness(), HarnessStats())
    assert not bad.changed and "rejected" in bad.reason

    def down(messages):
        raise ConnectionError("refused")

    assert "endpoint failed" in EndpointDriver(down, POOL, 10).next(_harness(), HarnessStats()).reason


def test_a_harness_asking_more_searches_than_the_evaluator_may_make_is_refused():
    """The evaluator makes at most evaluator_max_turns - 1 = 3 searches (its last turn writes the scores);
    a minimum of 4 would zero every score through the depth rule. Refused in the config, and a person's
    or an endpoint's harness asking for it is rejected with the reason (the recipe writes it as an event)."""
    from trainer.config import ConfigError, load_config

    sec = load_config({"method": "score"}).score
    assert (sec.evaluator_max_turns, sec.evaluator_searches(), sec.max_tool_calls) == (4, 3, 10)
    with pytest.raises(ConfigError) as err:
        load_config({"method": "score", "score": {"min_verification_searches": 4}})
    assert "3 allowed searches" in str(err.value)
    update = apply_human_edit(_harness(), _harness(tools=4), POOL, sec.evaluator_searches())
    assert not update.changed and "exceeds the evaluator's tool budget of 3 searches" in update.reason
    assert apply_human_edit(_harness(), _harness(tools=3), POOL, sec.evaluator_searches()).changed
    proposal = EndpointDriver(lambda m: json.dumps(_harness(tools=5)), POOL, sec.evaluator_searches())
    assert "rejected" in proposal.next(_harness(), HarnessStats()).reason


def test_the_solver_updates_in_the_papers_mini_batches_of_32_queries():
    from trainer.config import load_config
    from trainer.methods.parts import mini_batches

    assert load_config({"method": "score"}).score.mini_batch_size == 32  # of a batch of 64: two optimizer steps
    groups = [[f"q{i}a", f"q{i}b"] for i in range(5)]
    assert mini_batches(groups, 2) == [["q0a", "q0b", "q1a", "q1b"], ["q2a", "q2b", "q3a", "q3b"], ["q4a", "q4b"]]
    assert len(mini_batches([[0] * 8] * 64, 32)) == 2


def test_human_edits_are_validated_and_the_human_driver_waits():
    current = _harness()
    assert not HumanDriver().next(current, HarnessStats()).changed
    edit = _harness(k=2, must=("insight",), tools=0)
    update = apply_human_edit(current, json.dumps(edit), POOL, 10)
    assert update.changed and update.harness == edit
    rejected = apply_human_edit(current, {"dimension_constraints": {"k": 0}}, POOL, 10)
    assert not rejected.changed and rejected.harness == current and "rejected" in rejected.reason
    assert "exceeds the evaluator's tool budget" in apply_human_edit(current, _harness(tools=11), POOL, 10).reason


# --- recipe wiring on crafted inputs --------------------------------------------------------------

def test_report_rewards_apply_the_formula_and_the_depth_rule():
    from trainer.methods.score import report_rewards

    rubric = [("factuality", 0.5), ("insight", 0.3), ("citation", 0.2)]
    scores = [{"factuality": 0.8, "insight": 0.5, "citation": 1.0}] * 3 + [{"factuality": 1.0, "insight": 1.0,
                                                                            "citation": 1.0}]
    rewards = report_rewards([True, True, False, True], rubric, scores, searches=[2, 0, 2, 1], min_searches=1)
    # valid, searched 2 >= 1: 1 + 0.4 + 0.15 + 0.2 = 1.75 | evaluator searched 0 < 1: depth rule -> 0
    # invalid report: a(r) = 0 -> 0 | all ones: 1 + 0.5 + 0.3 + 0.2 = 2.0
    assert rewards == pytest.approx([1.75, 0.0, 0.0, 2.0])


def test_grounding_multiplies_each_reward_by_its_reports_grounded_share():
    from trainer.methods.score import report_rewards

    rubric = [("factuality", 0.5), ("insight", 0.5)]
    scores = [{"factuality": 1.0, "insight": 1.0}] * 3
    plain = report_rewards([True, True, False], rubric, scores, searches=[1, 1, 1], min_searches=1)
    grounded = report_rewards([True, True, False], rubric, scores, searches=[1, 1, 1], min_searches=1,
                              grounded=[1.0, 0.25, 1.0])
    assert plain == pytest.approx([2.0, 2.0, 0.0]) and grounded == pytest.approx([2.0, 0.5, 0.0])


def test_a_reports_grounding_reads_only_the_passages_its_own_searches_retrieved():
    from trainer.methods.score import grounding
    from trainer.rollout.types import Trajectory

    passage = ("<information>Doc 1 (Title: Prague) Prague is the capital and largest city of the Czech Republic, on "
               "the Vltava River, with a population of about 1.4 million.</information>")
    report = ("Prague is the capital and largest city of the Czech Republic. It lies on the Vltava River and has about "
              "1.4 million people.\nPrague's history dates back to the 13th century, with over 10 million visitors "
              "annually.")

    def traj(final, tool_text):
        turns = [{"role": "assistant", "text": "<search>Prague</search>"}, {"role": "tool", "text": tool_text},
                 {"role": "assistant", "text": f"<answer>{final}</answer>"}]
        return Trajectory(prompt_ids=[1], completion_ids=[2], loss_mask=[1], text="", final=final, turns=turns)

    # 3 sentences read; the 13th-century / 10-million one is not in the passage
    assert grounding([traj(report, passage)], 0.7) == pytest.approx([2 / 3])
    # the same report beside a passage about something else: nothing supported; no answer: 0
    assert grounding([traj(report, "<information>Doc 1 (Title: Oslo) Oslo is in Norway.</information>")], 0.7) == [0.0]
    assert grounding([traj(None, passage)], 0.7) == [0.0]


def test_consistency_on_crafted_reports():
    from trainer.methods.score import consistency

    same = "Intro.\n\nConclusion: deadly force needs night time and no other means."
    assert consistency([same, same, same]) == pytest.approx(1.0)
    disjoint = ["Conclusion: alpha beta.", "Conclusion: gamma delta.", "Conclusion: epsilon zeta."]
    assert consistency(disjoint) == 0.0
    # two of three agree: pairs (1,2) = 1, (1,3) = (2,3) = 0 -> mean 1/3
    assert consistency([same, same, "Conclusion: unrelated words here."]) == pytest.approx(1 / 3)
    assert consistency(["only one"]) == 0.0


def test_entropy_collapse_rule():
    from trainer.methods.score import entropy_collapsed

    sec = ScoreSection(entropy_collapse_ratio=0.25)
    assert entropy_collapsed(0.2, 1.0, sec) and not entropy_collapsed(0.3, 1.0, sec)
    assert entropy_collapsed(0.5, 1.0, ScoreSection(entropy_collapse_ratio=None, entropy_floor=0.6))
    assert not entropy_collapsed(0.01, 1.0, ScoreSection(entropy_collapse_ratio=None))


def test_queries_load_from_jsonl_or_text_with_clear_errors(tmp_path):
    from trainer.methods.score import load_queries

    path = tmp_path / "q.jsonl"
    path.write_text('{"query": "Why did Rome fall?"}\n\n{"query": "How do vaccines work?"}\n')
    assert load_queries(str(path)) == ["Why did Rome fall?", "How do vaccines work?"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "x"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1 has no non-empty"):
        load_queries(str(bad))


# --- end to end on CPU: tiny random model, in-memory BM25 corpus -------------------------------------

CORPUS = [
    {"title": "Texas Penal Code 9.42", "text": "Section 9.42 allows deadly force to protect property only at night "
     "and only when the property cannot be protected by other means."},
    {"title": "Castle doctrine", "text": "The castle doctrine lets a person use force to defend their home against "
     "an intruder without a duty to retreat."},
    {"title": "Self-defense", "text": "Self-defense law differs between states; most require proportional force."},
]


@pytest.fixture
def corpus_path(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in CORPUS))
    return path


def _run_score(tiny_config, corpus_path, run_dir, sink=None, **score):
    import trainer
    from trainer.tools.bm25 import InMemoryRetriever
    from trainer.tools.corpus import JsonlDocumentSource

    cfg = tiny_config("score", train={"steps": 3, "prompts_per_step": 2},
                      rollout={"max_new_tokens": 32, "group_size": 2}, corpus={"path": str(corpus_path)},
                      score={"max_tool_calls": 2, "evaluator_max_turns": 2, "evaluator_max_new_tokens": 32,
                             "harness_every": 2, "max_tool_tokens": 32, "dimensions": 3, **score})
    return trainer.run(cfg, sink=sink, run_dir=run_dir, retriever=InMemoryRetriever.from_jsonl(corpus_path),
                       documents=JsonlDocumentSource.from_jsonl(corpus_path))


def _rows(run_dir, name):
    return [json.loads(line) for line in (run_dir / name).read_text().splitlines()]


def test_score_runs_three_steps_on_cpu_and_reports_harness_versions(tiny_config, corpus_path, tmp_path):
    result = _run_score(tiny_config, corpus_path, tmp_path / "run", mini_batch_size=1)
    assert result.steps == 3 and result.final_checkpoint
    samples = _rows(tmp_path / "run", "samples.jsonl")
    events = [r for r in samples if r["kind"] == "event"]
    versions = [e for e in events if "harness" in e["data"]]
    assert [e["step"] for e in versions] == [1, 2]  # v0 at the start, the rule driver's refresh at step 2
    assert all(normalize_harness(e["data"]["harness"], POOL) == e["data"]["harness"] for e in versions)
    tasks = [r for r in samples if r["kind"] == "task"]
    assert len(tasks) == 6 and all(len(t["data"]["rubric"]["dimensions"]) == 3 for t in tasks)
    assert all(t["data"]["rubric"]["dimensions"][0]["name"] == "factuality" for t in tasks)
    grades = [r for r in samples if r["kind"] == "grade"]
    dims = {t["key"]: {d["name"] for d in t["data"]["rubric"]["dimensions"]} for t in tasks}
    assert len(grades) == 12
    assert all(set(g["data"]["scores"]) == dims[g["attempt_key"].rsplit(":", 1)[0]] for g in grades)
    metrics = _rows(tmp_path / "run", "metrics.jsonl")
    solver = [m for m in metrics if m["role"] == "solver"]
    evaluator = [m for m in metrics if m["role"] == "evaluator"]
    assert len(solver) == 3 and len(evaluator) == 3
    # a random model never writes the score format: every evaluation counts as a format failure, no crash
    assert all(m["eval_format_failures"] == 1.0 for m in solver)
    assert all("entropy" in m and "entropy_ratio" in m for m in solver)
    assert all("baseline" in m and "rubric_followed" in m for m in evaluator)
    # the paper's PPO mini-batch: 2 queries in mini-batches of 1 -> two Solver optimizer steps a step
    assert all(m["optimizer_steps"] == 2.0 and 0.0 <= m["truncated_rate"] <= 1.0 for m in solver)
    assert all(0.0 <= m["scoring_truncated_rate"] <= 1.0 for m in evaluator)
    assert all(m["searches_refused"] >= 0 and 0.0 <= m["depth_zeroed_of_valid"] <= 1.0 for m in solver)
    # the watchdog's rules read these for every role: groups without signal, generations cut
    assert all(0.0 <= m["zero_variance_groups"] <= 1.0 and 0.0 <= m["evaluator_truncated_rate"] <= 1.0 for m in solver)
    assert all(m["rubric_repaired"] == 1.0 and 0.0 <= m["truncated_rate"] <= 1.0 for m in evaluator)  # random model
    # dimension usage: every pool dimension's weight each step (0 when not chosen), the mandatory one always
    assert all(m["weight_factuality"] > 0 and sum(m[f"weight_{d}"] > 0 for d in POOL) == 3 for m in evaluator)
    assert all(sum(k.startswith("score_") for k in m) == 3 for m in solver)
    # the grounding measure, whether or not it is in the reward (off by default): each report's on its grade; the
    # step's mean over valid reports is logged only when one was valid (a random model's reports rarely are)
    assert all(0.0 <= g["data"]["grounded_share"] <= 1.0 for g in grades)
    assert all(0.0 <= m["grounded_share"] <= 1.0 for m in solver if "grounded_share" in m)


def test_a_harness_edited_by_a_person_replaces_the_harness_at_the_next_refresh(tiny_config, corpus_path, tmp_path):
    from trainer.sink import Control, NullSink

    edited = _harness(k=2, must=("citation",), tools=0)

    class EditingSink(NullSink):
        """What the web's sink does after a person saves a harness on the run page."""

        def control(self):
            return Control(harness=edited)

    _run_score(tiny_config, corpus_path, tmp_path / "run", sink=EditingSink(), meta_harness="human")
    samples = _rows(tmp_path / "run", "samples.jsonl")
    versions = [e for e in samples if e["kind"] == "event" and "harness" in e["data"]]
    assert versions[-1]["data"]["harness"] == edited and versions[-1]["data"]["driver"] == "human"
    step3 = [t for t in samples if t["kind"] == "task" and t["step"] == 3]
    assert step3 and all([d["name"] for d in t["data"]["rubric"]["dimensions"]][0] == "citation" for t in step3)


def test_entropy_collapse_stops_the_run_with_an_event_record(tiny_config, corpus_path, tmp_path):
    # a floor above any possible entropy: collapsed from step 1, patience 2 -> the run ends after step 2
    result = _run_score(tiny_config, corpus_path, tmp_path / "run", entropy_floor=1e9, entropy_patience=2)
    assert result.steps == 2 and result.stopped and result.final_checkpoint.endswith("step-000002")
    events = [r for r in _rows(tmp_path / "run", "samples.jsonl") if r["kind"] == "event"]
    stop = [e for e in events if e["data"].get("reason") == "entropy_collapse"]
    assert len(stop) == 1 and stop[0]["step"] == 2 and "early stop" in stop[0]["message"]


def test_the_endpoint_driver_talks_to_an_openai_compatible_server_through_the_judge_client():
    """A real HTTP server on the loopback answers like /v1/chat/completions."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from trainer.judge import EndpointClient

    proposal = _harness(k=5, must=("citation",), tools=2)
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            reply = {"choices": [{"message": {"role": "assistant", "content": json.dumps(proposal)}}]}
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = EndpointClient(f"http://127.0.0.1:{server.server_port}/v1", model="meta", retries=0, timeout=10)
        update = EndpointDriver(client.chat, POOL, 10).next(_harness(), HarnessStats(consistency=0.4))
    finally:
        server.shutdown()
    assert update.changed and update.harness == proposal
    assert seen[0]["model"] == "meta" and seen[0]["messages"][0]["role"] == "system"
    assert '"consistency": 0.4' in seen[0]["messages"][1]["content"]


# ---- the evaluator's budget, the executed rubric, truncation ------------------------------------

def _bare_score(tok, tool, generator=None, policy=None, **section):
    """A Score around real parts (tokenizer, search tool, scripted or real model) without a run."""
    from types import SimpleNamespace

    from trainer.config import load_config
    from trainer.methods.harness import starting_harness
    from trainer.methods.score import Score
    from trainer.rollout import SamplingParams

    cfg = load_config({"method": "score", "rollout": {"group_size": 1}, "score": section})
    score = Score.__new__(Score)
    score.cfg, score.sec, score.tok, score.tool = cfg, cfg.score, tok, tool
    score.pool = list(cfg.score.dimension_pool)
    score.step_harness, score.scheduled = None, {}
    harness = starting_harness(cfg.score, score.pool)
    harness["process_constraints"]["min_number_of_tool_call"] = 3  # the rule driver's ratchet at its top
    score.ctx = SimpleNamespace(state={"harness": harness}, generator=generator, policy=policy, config=cfg,
                                sampling_params=lambda **kw: SamplingParams(**{"max_new_tokens": 64, **kw}))
    return score


def test_the_evaluator_budget_is_per_turn_and_its_trajectory_fits_the_harness_searches(smollm2_tokenizer, tmp_path):
    """Three searches of ~500 tokens each and ~300 tokens of reasoning per turn: with 2,048 tokens for
    the whole trajectory (the old reading) the evaluation was cut before its scores; per turn, with
    the default trajectory cap, it ends with its scores."""
    from tests.trainer.test_rollout import ScriptedGenerator
    from trainer.rollout.types import Trajectory
    from trainer.tools import InMemoryRetriever, SearchTool

    tok = smollm2_tokenizer
    words = " ".join(f"castle{i} doctrine law defends the home against intruders" for i in range(120))
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"title": f"Doc {i}", "text": words}) + "\n" for i in range(3)))
    tool = SearchTool(InMemoryRetriever.from_jsonl(path), k=3, max_tokens=500, tokenizer=tok)
    sec = ScoreSection()
    assert sec.evaluator_trajectory_tokens() == 4 * 2048 + 3 * (500 + 16)
    score = _bare_score(tok, tool)
    rubric = constrain_rubric([], score.harness, score.pool, random.Random(0))
    report = Trajectory(prompt_ids=[1], final="A report on the castle doctrine. Conclusion: it varies.")
    msgs = evaluation_messages(score.harness, rubric.dims, "castle doctrine?", report.final, 10.0)
    prompt = score.ids(msgs[0]["content"], msgs[1]["content"])
    think = "<think>" + " ".join(["the report claims several things I should verify"] * 30) + "</think>"
    scores = "".join(f'<score dim="{d}" value="7"/>' for d, _ in rubric.dims)
    script = [[f"{think}<search>castle doctrine {i}</search>" for i in range(3)]
              + [f"{think}<verification>checked</verification><gap_analysis>none</gap_analysis>"
                 f"<scores>{scores}</scores>"]]
    score.ctx.generator = ScriptedGenerator(tok, [prompt], script)
    [ev] = score.evaluate(["castle doctrine?"], [report], rubric)
    assert ev.n_searches == 3 and ev.n_tool_tokens > 1200 and len(ev.completion_ids) > 2048
    assert not ev.truncated and parse_scores(ev.turns[-1]["text"], [d for d, _ in rubric.dims], 10.0).well_formed


def test_an_explicit_evaluator_trajectory_cap_must_hold_the_allowed_searches():
    with pytest.raises(ValueError, match="evaluator_max_total_tokens 2048 cannot hold"):
        ScoreSection(evaluator_max_total_tokens=2048)
    assert ScoreSection(evaluator_max_total_tokens=4000).evaluator_trajectory_tokens() == 4000


def test_the_ratchet_lowers_the_search_minimum_on_truncation_and_never_raises_it_then():
    down = RuleDriver(POOL, 10).next(_harness(tools=2), HarnessStats(evaluator_truncated_rate=0.5,
                                                                      evaluator_searches=2.5))
    assert down.harness["process_constraints"]["min_number_of_tool_call"] == 1 and "cut at their token" in down.reason
    held = RuleDriver(POOL, 10).next(_harness(tools=1), HarnessStats(evaluator_truncated_rate=0.2, evaluator_searches=3))
    assert held.harness["process_constraints"]["min_number_of_tool_call"] == 1  # comfortable searches, but cuts
    assert summarize([{"evaluator_truncated_rate": 0.4}, {"evaluator_truncated_rate": 0.2}]).evaluator_truncated_rate \
        == pytest.approx(0.3)


def test_the_evaluator_update_reinforces_the_rubric_that_was_executed(tiny_config, smollm2_tokenizer):
    """A repaired rubric is re-tokenised: the update's action is the rubric the reports were judged
    by, with its log-probs under the policy; a rubric the model wrote within the harness is its own."""
    from tests.trainer.test_rollout import forward_logprobs
    from trainer.config import load_config
    from trainer.methods.score_prompts import render_rubric
    from trainer.models import load_policy
    from trainer.rollout.types import Trajectory

    policy = load_policy(load_config(tiny_config("score")))
    score = _bare_score(smollm2_tokenizer, None, policy=policy)
    prompt = score.ids("Choose a rubric.", "Queries:\n- castle doctrine?")
    raw = '<dimensions><dim name="factuality"/><dim name="vibes" weight="9"/></dimensions>'
    ids = smollm2_tokenizer.encode(raw, add_special_tokens=False)
    traj = Trajectory(prompt_ids=prompt, completion_ids=ids, loss_mask=[1] * len(ids), logprobs=[-1.0] * len(ids),
                      text=raw, finish_reason="eos", temperature=0.8)
    rubric = constrain_rubric(parse_rubric(raw), score.harness, score.pool, random.Random(0))
    assert not rubric.followed  # "vibes" is not in the pool: dimensions were drawn in its place
    action = score.executed(traj, rubric)
    text = render_rubric(rubric.dims, score.harness["dimension_constraints"]["must_include"])
    assert action.text == text and action.completion_ids[-1] == smollm2_tokenizer.eos_token_id
    assert parse_rubric(smollm2_tokenizer.decode(action.completion_ids)) == [
        (d, None if d == "factuality" else round(w, 2)) for d, w in rubric.dims]
    assert action.logprobs == pytest.approx(
        forward_logprobs(policy.model, prompt, action.completion_ids, 0.8).tolist(), abs=1e-4)
    followed = constrain_rubric([("factuality", None), ("insight", 0.3), ("coherence", 0.2), ("citation", 0.4)],
                                score.harness, score.pool, random.Random(0))
    assert followed.followed and score.executed(traj, followed) is traj


def test_the_dimension_scheduler_rotates_a_fixed_rubric_and_requires_what_was_never_tried():
    from trainer.methods.dimension_scheduler import DimensionScheduler

    harness = _harness(k=3)
    sched = DimensionScheduler(POOL, streak=3, explore_after=4)
    h, pool, said = sched.constrain(harness, POOL, ["factuality"])
    assert said["required"] == said["avoided"] == [] and pool == POOL and "Not tried yet" in said["hints"]
    for c in (0.8, 0.6, 0.7):  # the same rubric three steps running
        sched.update_stats(["factuality", "insight", "coherence"], [c])
    h, pool, said = sched.constrain(harness, POOL, ["factuality"])
    assert said["avoided"] == ["insight", "coherence"] and "insight" not in pool and "factuality" in pool
    assert "Do not choose this step" in h["notes"] and "insight 0.70" in h["notes"]
    rubric = constrain_rubric([("insight", 0.3), ("coherence", 0.3)], h, pool, random.Random(0))
    assert not rubric.followed and {d for d, _ in rubric.dims}.isdisjoint({"insight", "coherence"})
    sched.update_stats(["factuality", "citation", "complexity"], [0.5])
    h, pool, said = sched.constrain(harness, POOL, ["factuality"])
    assert said["required"] == ["comprehensiveness"]  # never chosen in 4 steps, first in pool order
    assert h["dimension_constraints"]["must_include"] == ["factuality", "comprehensiveness"]
    assert harness["dimension_constraints"]["must_include"] == ["factuality"]  # the harness itself is untouched
    again = DimensionScheduler(POOL, streak=3, explore_after=4)
    again.load_state_dict(sched.state_dict())
    assert again.constrain(harness, POOL, ["factuality"])[2] == said


def test_each_methods_run_page_panel_tells_its_story():
    """SCOPE: gates, rubrics per task, judge scores, dead groups and cuts per role; SCORE: harness version,
    evaluations cut, rubric repairs; pi-Play: the hop mix of valid questions, divergence to the teacher,
    the Student batch and how many passages it took."""
    from trainer.method_configs import SECTIONS

    def panel(method):
        return {(role, name) for role, name, _ in SECTIONS[method].panel_metrics}

    assert {("challenger", "gate_pass_rate"), ("challenger", "rubrics_per_task"), ("solver", "rubric_score"),
            ("challenger", "zero_variance_groups"), ("solver", "zero_variance_groups"), ("judge", "truncated_rate"),
            ("challenger", "truncated_rate"), ("solver", "truncated_rate")} <= panel("scope")
    assert {("solver", "harness_version"), ("solver", "evaluator_truncated_rate"), ("evaluator", "rubric_repaired"),
            ("solver", "zero_variance_groups"), ("solver", "grounded_share")} <= panel("score")
    assert {("examiner", f"valid_hops_{h}") for h in range(1, 5)} | {
        ("student", "distill"), ("student", "questions"), ("student", "passages_drawn"),
        ("student", "zero_variance_groups")} <= panel("piplay")
