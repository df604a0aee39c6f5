"""trainer/evaluate.py: benchmark files, each scoring mode on known cases, bootstrap intervals,
cloze QA, the evaluation loop and checkpoint loading on the tiny model, cross-play pieces."""
import json
import math

import numpy as np
import pytest

from tests.trainer.test_judge import server  # noqa: F401  (a real OpenAI-compatible server on 127.0.0.1)
from trainer.evaluate import (
    BenchmarkError,
    Item,
    challenger_tasks,
    ModelSpecError,
    bootstrap_ci,
    cloze_items,
    describe_target,
    evaluate,
    extract_prediction,
    load_benchmark,
    load_builtin,
    load_model,
    prompt_messages,
    read_jsonl,
    reasoner_answers,
    score_batch,
    score_prediction,
    solve_rate,
    spice_section,
    write_jsonl,
)
from trainer.judge import Judge
from trainer.rollout import SamplingParams
from trainer.tools.corpus import Document


# ---- benchmark files ----------------------------------------------------------------------------

def test_it_reads_a_jsonl_benchmark_with_choices_and_aliases(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_text('{"question": "Capital of France?", "answer": "Paris"}\n\n'
                    '{"question": "2+2?", "answer": 4, "id": "q2"}\n'
                    '{"question": "Pick red", "choices": ["blue", "red"], "answer": "red"}\n'
                    '{"question": "Who?", "answer": ["Bob", "Robert"], "topic": "names"}\n')
    items = read_jsonl(path)
    assert [i.id for i in items] == ["0", "q2", "2", "3"]
    assert items[1].answer == "4"
    assert items[2].choices == ["blue", "red"] and items[2].answer == "B"
    assert items[3].answer == ["Bob", "Robert"] and items[3].meta == {"topic": "names"}
    out = write_jsonl(items, tmp_path / "copy.jsonl")
    assert [i.to_dict() for i in read_jsonl(out)] == [i.to_dict() for i in items]


@pytest.mark.parametrize("lines, message", [
    (['{"question": "a", "answer": "b"}', "{not json"], r"b.jsonl:2: not valid JSON"),
    (['{"question": "a"}'], r":1: \"answer\" is missing"),
    (['{"question": "", "answer": "b"}'], r":1: \"question\" must be a non-empty string"),
    (['["a", "b"]'], r":1: each line must be a JSON object"),
    (['{"question": "a", "answer": "E", "choices": ["x", "y"]}'], r"a letter A-B or the exact text"),
    (['{"question": "a", "answer": "x", "choices": "x,y"}'], r"\"choices\" must be a list"),
    (['{"question": "a", "answer": {"x": 1}}'], r"\"answer\" must be a non-empty string"),
    (['{"question": "a", "answer": "b", "scoring": "vibes"}'], r"\"scoring\" must be one of"),
    (['{"id": 1, "question": "a", "answer": "b"}', '{"id": 1, "question": "c", "answer": "d"}'], "duplicate id"),
    ([], "holds no items"),
])
def test_bad_benchmark_files_say_which_line_and_what_to_fix(lines, message):
    with pytest.raises(BenchmarkError, match=message):
        read_jsonl([line + "\n" for line in lines], "b.jsonl")


def test_non_utf8_bytes_are_refused_with_the_line():
    with pytest.raises(BenchmarkError, match="b.jsonl:1: not UTF-8"):
        read_jsonl([b"\xff\xfe{}\n"], "b.jsonl")


def test_bundled_benchmarks_load_with_their_scoring():
    gsm, mode = load_builtin("gsm8k")
    assert (len(gsm), mode, gsm[0].answer) == (1319, "math", "18")
    aime, mode = load_builtin("AIME-2025")
    assert (len(aime), mode, aime[0].answer) == (30, "math", "70")
    gpqa, mode = load_builtin("gpqa")
    assert mode == "mcq" and len(gpqa) >= 190
    assert all(i.answer in "ABCD" for i in gpqa)
    assert not gpqa[0].question.startswith("Answer the following")  # our \boxed{} format replaces theirs
    with pytest.raises(BenchmarkError, match="unknown bundled benchmark"):
        load_builtin("mmlu")
    with pytest.raises(BenchmarkError, match="does not exist"):
        load_benchmark("/nope/missing.jsonl")


# ---- extraction and scoring ---------------------------------------------------------------------

@pytest.mark.parametrize("text, mode, final, expected", [
    ("so \\boxed{\\frac{1}{2}} it is", "math", None, "\\frac{1}{2}"),
    ("searching... <answer> Paris </answer>", "exact", None, "Paris"),
    ("blah", "exact", "Lyon", "Lyon"),
    ("reasoning\nAnswer: C", "mcq", None, "C"),
    ("I pick (B) because", "mcq", None, "B"),
    ("3 apples and 4 pears make 7", "math", None, "7"),
    ("costs 1,234 dollars", "math", None, "1234"),
    ("first line\nthe Eiffel Tower\n", "exact", None, "the Eiffel Tower"),
    ("", "exact", None, None),
    (None, "math", None, None),
])
def test_it_extracts_the_answer(text, mode, final, expected):
    assert extract_prediction(text, mode, final) == expected


def test_each_rule_based_mode_on_known_cases():
    assert score_prediction("0.5", "\\frac{1}{2}", "math") == 1.0
    assert score_prediction("1/3", "0.5", "math") == 0.0
    assert score_prediction("\\text{(B)}", "B", "mcq") == 1.0
    assert score_prediction("C", "B", "mcq") == 0.0
    assert score_prediction("The Paris!", "paris", "exact") == 1.0
    assert score_prediction("Paris, France", ["Lutetia", "Paris"], "exact") == 0.0
    # F1: pred "eiffel tower" vs gold "eiffel tower paris": P = 2/2, R = 2/3, F1 = 2*1*(2/3)/(1+2/3) = 0.8
    assert score_prediction("the Eiffel Tower", "Eiffel Tower, Paris", "f1") == pytest.approx(0.8)
    assert score_prediction(None, "x", "exact") == 0.0
    with pytest.raises(BenchmarkError, match="scoring must be one of"):
        score_prediction("a", "a", "fuzzy")


def test_judge_mode_asks_equivalence_or_the_rubric(server):  # noqa: F811
    judge = Judge.from_endpoint(server.url, "judge", timeout=5)
    items = [Item("1", "Capital of France?", "Paris"), Item("2", "Capital of Italy?", "Rome"),
             Item("3", "Describe Paris", "-", rubric="Mentions the river Seine")]
    scores = score_batch(items, ["It is Paris", "Milan", None], ["", "", "Paris lies on the Seine"], "judge", judge)
    assert scores == [1.0, 0.0, 1.0]
    with pytest.raises(BenchmarkError, match="needs a judge"):
        score_batch(items, ["a", "b", "c"], ["", "", ""], "judge", None)


def test_an_items_own_scoring_overrides_the_benchmarks():
    items = [Item("1", "q", "4", scoring="math"), Item("2", "q", "B", scoring="mcq"), Item("3", "q", "red")]
    assert score_batch(items, ["4.0", "(B)", "Red"], ["", "", ""], "exact") == [1.0, 1.0, 1.0]


def test_prompts_follow_spice_without_search_and_search_r1_with_it():
    mcq = Item("1", "Which?", "A", choices=["x", "y", "z", "w"])
    system, user = prompt_messages(mcq, "mcq", search=False)
    assert system is None and "A) x\nB) y" in user and "(A, B, C or D) within \\boxed{}" in user
    _, user = prompt_messages(Item("2", "Pick", "B", choices=["x", "y"]), "mcq", search=False)
    assert "(A, B, C or D)" not in user and "\\boxed{}" in user
    system, user = prompt_messages(Item("3", "Who wrote Dune?", "Frank Herbert"), "exact", search=True)
    assert "<search>" in user and "<answer>" in user and user.endswith("Who wrote Dune?")


# ---- bootstrap ----------------------------------------------------------------------------------

def test_bootstrap_interval_matches_the_normal_approximation():
    scores = [1.0] * 50 + [0.0] * 50
    lo, hi = bootstrap_ci(scores, n_resamples=4000, seed=3)
    # mean 0.5, standard error sqrt(0.25 / 100) = 0.05, 95% -> 0.5 -/+ 1.96 * 0.05 = (0.402, 0.598)
    assert lo == pytest.approx(0.402, abs=0.02) and hi == pytest.approx(0.598, abs=0.02)
    assert bootstrap_ci(scores, seed=3) == bootstrap_ci(scores, seed=3)


def test_bootstrap_degenerate_cases():
    assert bootstrap_ci([1.0, 1.0, 1.0]) == (1.0, 1.0)
    assert all(math.isnan(v) for v in bootstrap_ci([]))
    lo, hi = bootstrap_ci([0.8, 0.6, 1.0, 0.2])
    assert 0.2 <= lo <= np.mean([0.8, 0.6, 1.0, 0.2]) <= hi <= 1.0


# ---- held-out cloze QA --------------------------------------------------------------------------

DOCS = [
    Document("d1", "Eiffel Tower", "The Eiffel Tower is a wrought-iron lattice tower in Paris, France. "
             "It was designed by the engineering company of Gustave Eiffel and built from 1887 to 1889 for the fair."),
    Document("d2", "Moon", "The Moon is the only natural satellite of Earth. "
             "It orbits at an average distance of 384,400 km from the planet, about 30 times its diameter."),
    Document("d3", "Short", "Too short."),
]


def test_cloze_items_blank_a_span_of_the_document_and_are_reproducible():
    items = cloze_items(DOCS, 5, seed=7)
    assert len(items) == 2  # the third document has no usable sentence
    for item in items:
        doc = next(d for d in DOCS if d.id == item.meta["document_id"])
        assert item.answer in item.meta["source"] and item.meta["source"] in doc.text
        assert "____" in item.question and item.answer not in item.question
        assert item.answer.lower() not in doc.title.lower()
    assert [i.to_dict() for i in cloze_items(DOCS, 5, seed=7)] == [i.to_dict() for i in items]
    assert len(cloze_items(DOCS, 1, seed=7)) == 1


# ---- the loop on the tiny model -----------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_model(str(tiny_model_dir), device="cpu")


def test_evaluate_writes_samples_and_an_interval(tiny):
    items = [Item(str(i), f"What is {i} + 1?", str(i + 1)) for i in range(5)]
    seen = []
    result = evaluate(tiny.generator, tiny.tokenizer, items, "math", batch_size=2,
                      sampling=SamplingParams(temperature=0.0, max_new_tokens=6),
                      on_batch=lambda new, done, total: seen.append((len(new), done, total)), name="arith")
    assert seen == [(2, 2, 5), (2, 4, 5), (1, 5, 5)]
    assert result.n == 5 and [s["index"] for s in result.samples] == list(range(5))
    assert set(result.samples[0]) >= {"question", "gold", "prediction", "output", "correct", "score"}
    assert result.ci_low <= result.score <= result.ci_high
    assert result.correct == sum(s["score"] == 1.0 for s in result.samples)


def test_evaluate_with_the_search_tool_records_turns(tiny):
    from trainer.tools import InMemoryRetriever
    from trainer.tools.search import SearchTool

    tool = SearchTool(InMemoryRetriever(DOCS), k=2, max_tokens=50, tokenizer=tiny.tokenizer)
    result = evaluate(tiny.generator, tiny.tokenizer, [Item("1", "Who designed the tower?", "Gustave Eiffel")],
                      "f1", search_tool=tool, max_turns=2,
                      sampling=SamplingParams(temperature=1.0, max_new_tokens=8))
    sample = result.samples[0]
    assert sample["turns"] and sample["turns"][0]["role"] == "assistant"
    assert 0.0 <= sample["score"] <= 1.0 and "passages" in sample


def test_checkpoints_load_full_and_lora(tmp_path, tiny_config):
    from trainer import run

    for lora in (0, 4):
        out = tmp_path / f"lora{lora}"
        result = run(tiny_config(train={"steps": 1}, model={"lora": {"r": lora}}), run_dir=out)
        target = describe_target(result.final_checkpoint)
        assert (target["kind"], target["step"], target["lora"]) == ("checkpoint", 1, bool(lora))
        loaded = load_model(result.final_checkpoint, device="cpu")
        assert loaded.is_lora == bool(lora) and "@ 1" in loaded.label
        outs = loaded.generator.generate([[1, 2, 3]], SamplingParams(temperature=0.0, max_new_tokens=3))
        assert len(outs[0].completion_ids) <= 3
    with pytest.raises(ModelSpecError, match="pruned"):
        describe_target(str(tmp_path / "gone" / "step-000009"))
    with pytest.raises(ModelSpecError, match="base: needs a model name"):
        describe_target("base:")


def test_solve_rate_answers_given_tasks_as_the_spice_reasoner(tiny):
    tasks = [{"question": "What is 2+2?", "answer": "4", "format": "free_form", "answer_type": "integer"},
             {"question": "Pick A) 1 B) 2 C) 3 D) 4", "answer": "B", "format": "mcq", "answer_type": "mcq"}]
    rate, correct = solve_rate(tiny, tasks, SamplingParams(temperature=1.0, max_new_tokens=4), answers_per_task=3)
    assert [len(c) for c in correct] == [3, 3]
    assert rate == sum(map(sum, correct)) / 6
    assert solve_rate(tiny, [], SamplingParams()) == (None, [])


class CountingGenerator:
    """The real generator, counting the rows of each call (how the work was batched)."""

    def __init__(self, generator):
        self.generator, self.calls = generator, []

    def generate(self, prompts, params, **kw):
        if prompts:
            self.calls.append(len(prompts))
        return self.generator.generate(prompts, params, **kw)


def test_reasoner_answers_batches_whole_tasks_and_gives_each_answers_details(tiny):
    from dataclasses import replace

    tasks = [{"question": f"What is {i}+2?", "answer": str(i + 2), "format": "free_form", "answer_type": "integer"}
             for i in range(3)]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=5)
    counting = replace(tiny, generator=CountingGenerator(tiny.generator))
    details = reasoner_answers(counting, tasks, greedy, answers_per_task=2, batch_size=3)
    assert counting.generator.calls == [2, 2, 2]  # 3 answers a call hold one whole task of 2
    assert [len(d["correct"]) for d in details] == [2, 2, 2]
    for d in details:
        assert set(d) == {"correct", "boxed", "truncated", "tokens", "predictions"}
        assert all(0 < n <= 5 for n in d["tokens"])
        assert d["truncated"] == [n == 5 for n in d["tokens"]]
        assert d["boxed"] == [p is not None for p in d["predictions"]]
        assert d["predictions"][0] == d["predictions"][1]  # greedy: both answers alike
    counting.generator.calls.clear()
    rate, correct = solve_rate(counting, tasks, greedy, answers_per_task=2)
    assert counting.generator.calls == [6]  # no batch size: one call
    assert correct == [d["correct"] for d in details]
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        reasoner_answers(tiny, tasks, greedy, batch_size=0)


def test_challenger_tasks_batches_documents_and_logs_every_attempt(tiny):
    from dataclasses import replace

    counting = replace(tiny, generator=CountingGenerator(tiny.generator))
    section = spice_section({"format_max_new_tokens": 16})
    sampling = SamplingParams(temperature=1.0, max_new_tokens=8)
    log = []
    tasks, tried = challenger_tasks(counting, DOCS, 4, sampling, section, max_rounds=2, batch_size=2,
                                    attempts_log=log)
    assert tried == len(log) == 6  # 2 rounds of the 3 documents (a round takes 2 x 4 missing, at most all 3)
    assert counting.generator.calls[0] == 2 and max(counting.generator.calls) == 2  # never more than 2 documents
    counting.generator.calls.clear()
    challenger_tasks(counting, DOCS, 4, sampling, section, max_rounds=1)
    assert counting.generator.calls[0] == 3  # no batch size: the round's 3 documents in one call
    assert [r["round"] for r in log] == [0, 0, 0, 1, 1, 1]
    assert [r["document_id"] for r in log] == ["d1", "d2", "d3"] * 2
    for r in log:
        assert set(r) == {"document_id", "document_title", "round", "valid", "reason", "truncated"}
        assert r["valid"] == (r["reason"] == "")
    assert len(tasks) == sum(r["valid"] for r in log)  # a random tiny model writes no valid task in practice
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        challenger_tasks(tiny, DOCS, 1, sampling, section, batch_size=0)


def test_paired_difference_matches_items_and_sees_a_gain_two_intervals_hide():
    from trainer.evaluate import paired_difference

    # 300 items: 30 gained, 12 lost, the rest unchanged (the GPU SPICE run's held-out cloze, 13.0% -> 19.0%)
    before = {i: 1.0 if i < 39 else 0.0 for i in range(300)}
    after = dict(before)
    for i in range(12):
        after[i] = 0.0
    for i in range(100, 130):
        after[i] = 1.0
    assert sum(before.values()) == 39 and sum(after.values()) == 57
    lo_a, hi_a = bootstrap_ci(list(before.values()))
    lo_b, hi_b = bootstrap_ci(list(after.values()))
    assert lo_b < hi_a  # the two intervals overlap ...
    d = paired_difference(before, after)
    assert d["n"] == 300 and (d["gained"], d["lost"]) == (30, 12)
    assert d["diff"] == pytest.approx(0.06) and 0.0 < d["low"] < 0.06 < d["high"]  # ... the paired one excludes 0
    assert paired_difference(before, before) == {"diff": 0.0, "low": 0.0, "high": 0.0, "n": 300, "gained": 0,
                                                 "lost": 0}
    # only shared items count; none shared -> None
    assert paired_difference({"a": 0.0, "b": 1.0}, {"b": 0.0, "c": 1.0})["n"] == 1
    assert paired_difference({"a": 1.0}, {"b": 1.0}) is None


def test_a_jsonl_of_numeric_answers_is_scored_as_math_by_default(tmp_path):
    """GSM8K's halves as JSONL (benchmarks/gpu/gsm8k_split.py) were scored `exact` unless told, while the bundled
    GSM8K is `math`: "\\boxed{15.00}" against 15 counted wrong."""
    from trainer.evaluate import default_scoring, load_benchmark

    rows = [{"question": "Sheep?", "answer": "15"}, {"question": "Cost?", "answer": "1,200"},
            {"question": "Change?", "answer": "-2.5"}]
    bench = tmp_path / "gsm.jsonl"
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    items, scoring = load_benchmark(str(bench))
    assert scoring == "math"
    assert score_prediction("\\boxed{15.00}", items[0].answer, scoring) == 1.0
    assert score_prediction("\\boxed{15.00}", items[0].answer, "exact") == 0.0
    assert load_benchmark(str(bench), "exact")[1] == "exact"  # an explicit mode still wins
    mixed = items + [Item("4", "Capital?", "Paris")]
    assert default_scoring(mixed) == "exact"
    assert default_scoring([Item("5", "Pick", "B", choices=["x", "y"])]) == "mcq"
    assert default_scoring([Item("6", "Aliases", ["15", "fifteen"])]) == "exact"
    assert default_scoring([Item("7", "List", "3,5"), Item("8", "Cut", "1,")]) == "exact"  # list-like, not numbers


def test_bootstrap_for_large_n_keeps_memory_bounded_and_the_interval():
    """Above 4M resampled values a 0/1 (or few-valued) sample resamples its value counts (the same distribution);
    many distinct values resample in chunks. Both agree with the small-N path's interval to sampling noise."""
    rng = np.random.default_rng(1)
    binary = (rng.random(50_000) < 0.3).astype(float)
    lo, hi = bootstrap_ci(binary, n_resamples=2000)  # 100M cells: the counts path
    half = 1.96 * math.sqrt(0.3 * 0.7 / 50_000)
    assert abs((hi - lo) / 2 - half) < 0.15 * half and lo < binary.mean() < hi
    spread = rng.random(50_000)  # 50k distinct values: the chunked path
    lo, hi = bootstrap_ci(spread, n_resamples=200)
    assert abs((hi - lo) / 2 - 1.96 * spread.std() / math.sqrt(50_000)) < 0.2 * 1.96 * spread.std() / math.sqrt(50_000)
    assert bootstrap_ci(binary, n_resamples=2000) == bootstrap_ci(binary, n_resamples=2000)  # deterministic


def test_the_command_line_prints_one_json_line(tmp_path, tiny_model_dir, capsys):
    from trainer.evaluate import main

    bench = tmp_path / "b.jsonl"
    bench.write_text(json.dumps({"question": "Say hi", "answer": "hi"}) + "\n")
    assert main([str(tiny_model_dir), "--benchmark", str(bench), "--max-new-tokens", "4",
                 "--samples", str(tmp_path / "s.jsonl")]) == 0
    line = json.loads(capsys.readouterr().out.strip())
    assert line["n"] == 1 and line["scoring"] == "exact"
    assert json.loads((tmp_path / "s.jsonl").read_text())["gold"] == "hi"
    assert main(["base:", "--benchmark", "gsm8k"]) == 2
    # a model name that resolves to nothing: the message, not a traceback
    assert main(["base:no-such-model", "--benchmark", str(bench)]) == 2
    assert "not found" in capsys.readouterr().err


def test_library_code_never_imports_a_recipe():
    """A recipe (trainer/methods/<method>.py) is a top-level script: trainer's library code, the
    shared parts and the web reach SPICE's Challenger/Reasoner through spice_tasks, never the recipe."""
    import ast
    from pathlib import Path

    from trainer.methods import METHODS

    root = Path(__file__).resolve().parents[2]
    recipes = {f"trainer.methods.{name}" for name in METHODS}
    offenders = []
    for path in [*(root / "trainer").rglob("*.py"), *(root / "apps").rglob("*.py")]:
        if path.parent.name == "methods" and path.stem in METHODS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            offenders += [f"{path.relative_to(root)} imports {n}" for n in names if n in recipes]
    assert offenders == []


def test_time_to_reach_is_the_first_checkpoint_at_or_above_and_its_interpolation():
    from trainer.evaluate import time_to_reach

    # GRPO seed 0 of 2026-11-27 against TRL's final 31.11%: 28.68% at 181.3 s, 31.87% at 242.0 s
    ours = [(0.0, 0.2792), (63.1, 0.2716), (120.2, 0.2822), (181.3, 0.2868), (242.0, 0.3187), (305.6, 0.3505)]
    first, interp = time_to_reach(ours, 0.3111)
    assert first == 242.0
    assert interp == pytest.approx(181.3 + (0.3111 - 0.2868) / (0.3187 - 0.2868) * (242.0 - 181.3))  # 227.5 s
    assert time_to_reach(list(reversed(ours)), 0.3111) == (first, interp)  # by time, whatever the order given
    assert time_to_reach(ours, 0.2792) == (0.0, 0.0)  # the base already scores it
    assert time_to_reach(ours, 0.36) == (None, None)  # never reached
    assert time_to_reach([(0.0, 0.2), (60.0, 0.3), (120.0, 0.3)], 0.3) == (60.0, 60.0)  # exactly at a point
