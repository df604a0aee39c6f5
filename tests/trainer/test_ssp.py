"""SSP: rule filter decisions, noise-passage mixing, replay buffer reset, review flags, answers."""
import random
from collections import Counter

import pytest

from trainer.methods.replay import ReplayBuffer
from trainer.methods.review import ReviewState
from trainer.methods.ssp_tasks import (
    corpus_answer,
    format_materials,
    load_answers,
    mix_noise,
    parse_rag_answer,
    rule_filter,
    span_answers,
    title_answer,
)
from trainer.sink import Verdict
from trainer.tools.retriever import Passage

GOOD_Q = "Which castle in Devon was designed by the architect who laid out the Hestercombe garden?"


def P(doc, chunk=None, text=None):
    return Passage(document_id=doc, chunk_id=chunk or f"{doc}-0", title=f"T{doc}", text=text or f"text of {doc}")


# ---- the rule filter (reference code's checks, in order) -------------------------------------

@pytest.mark.parametrize("question, answer, queries, n_passages, reason", [
    (GOOD_Q, "Castle Drogo", ["lutyens castle", "hestercombe garden"], 6, "ok"),
    (None, "Castle Drogo", ["a", "b"], 6, "no_question"),
    ("   ", "Castle Drogo", ["a", "b"], 6, "no_question"),
    ("Who?", "Castle Drogo", ["a", "b"], 6, "too_short"),
    ("word " * 250, "Castle Drogo", ["a", "b"], 6, "too_long"),
    ("Which castle was designed by Lutyens?", "Castle Drogo", ["a", "b"], 6, "too_few_words"),
    (GOOD_Q + " Is it castle drogo?", "Castle Drogo", ["a", "b"], 6, "contains_answer"),
    (GOOD_Q, "Castle Drogo", ["a", "b"], 0, "no_materials"),
    (GOOD_Q, "Castle Drogo", ["lutyens castle"], 3, "too_few_searches"),
    (GOOD_Q, "Castle Drogo", ["lutyens castle", "  "], 3, "too_few_searches"),
    (GOOD_Q, "Castle Drogo", ["lutyens castle", "lutyens castle"], 6, "duplicate_queries"),
])
def test_rule_filter_decisions(question, answer, queries, n_passages, reason):
    result = rule_filter(question, answer, queries, n_passages)
    assert result.reason == reason
    assert result.ok == (reason == "ok")


def test_rule_filter_bounds_are_inclusive_and_configurable():
    ten_words = "one two three four five six seven eight nine ten"
    assert rule_filter(ten_words, "zzz", ["a", "b"], 1).ok
    assert rule_filter(ten_words, "zzz", ["a", "b"], 1, min_words=11).reason == "too_few_words"
    assert rule_filter(ten_words, "zzz", ["a"], 1, min_searches=1).ok
    assert rule_filter("x" * 1000 + " a b c d e f g h i", "zzz", ["a", "b"], 1).reason == "too_long"


# ---- RAG noise mixing -------------------------------------------------------------------------

def test_mix_noise_adds_k_passages_from_other_trajectories_only():
    own = [P("a"), P("b"), P("a")]  # the Proposer retrieved chunk a twice
    others = [[P("b"), P("c"), P("d")], [P("e"), P("f")], []]
    materials, noise = mix_noise(own, others, 2, random.Random(0))
    assert len(noise) == 2
    assert {p.document_id for p in noise} <= {"c", "d", "e", "f"}  # never one of its own (b is its own)
    assert sorted(p.document_id for p in materials) == sorted(["a", "b"] + [p.document_id for p in noise])


def test_mix_noise_uses_what_there_is_and_shuffles():
    own = [P(str(i)) for i in range(6)]
    materials, noise = mix_noise(own, [[P("x")]], 4, random.Random(3))
    assert [p.document_id for p in noise] == ["x"] and len(materials) == 7
    orders = {tuple(p.document_id for p in mix_noise(own, [[P("x")]], 4, random.Random(s))[0]) for s in range(10)}
    assert len(orders) > 1  # the noise is not always at the end


def test_mix_noise_with_zero_noise_returns_own_passages():
    materials, noise = mix_noise([P("a"), P("b")], [[P("c")]], 0, random.Random(0))
    assert noise == [] and sorted(p.document_id for p in materials) == ["a", "b"]


def test_materials_and_rag_answer_parsing():
    assert format_materials([P("a"), P("b")]) == "Doc 1 (Title: Ta) text of a\nDoc 2 (Title: Tb) text of b"
    assert parse_rag_answer("It is in Devon.\nAnswer: Castle Drogo\nextra") == "Castle Drogo"
    assert parse_rag_answer("answer: x. Answer：Y") == "Y"
    assert parse_rag_answer("no idea") == "no idea"  # the reference judges a reply without 'Answer:' whole
    assert parse_rag_answer("Answer:   ") is None
    assert parse_rag_answer("") is None and parse_rag_answer("  \n") is None and parse_rag_answer(None) is None


# RAG-check replies of Qwen2.5-Coder-1.5B-Instruct in the H100 run ssp15 (benchmarks/gpu/learn_ssp.yaml),
# shortened; 22 of its 34 checks had no 'Answer:' and were failed without asking the judge.
@pytest.mark.parametrize("reply, parsed", [
    ("The name of the species whose moniker corresponds to the most frequent surname listed is Equisetum.",
     "The name of the species whose moniker corresponds to the most frequent surname listed is Equisetum."),
    ("Doc 2 (Haiku)", "Doc 2 (Haiku)"),  # gold "Haiku": "What is a type of short-form poetry ... 5, 7, 5 ...?"
    ("Reason: The capital of the state of California is Sacramento.\n\nAnswer: Sacramento", "Sacramento"),
    ("Reason: Guangdong is the largest province in China ... Guangzhou.\n\nAnswer: Guangzhou", "Guangzhou"),
])
def test_rag_replies_of_the_gpu_run_are_answers_for_the_judge(reply, parsed):
    assert parse_rag_answer(reply) == parsed


def test_a_bare_rag_reply_can_pass_exact_match():
    from trainer.methods.ssp import judged
    assert judged(None, [("q", parse_rag_answer("Equisetum."), "Equisetum")]) == [True]  # was None -> Wrong


# ---- replay buffer with periodic reset --------------------------------------------------------

def test_replay_buffer_refills_and_resets_every_n_steps():
    buf = ReplayBuffer(reset_every=10)
    for step in range(1, 10):
        buf.add([{"key": f"{step}:0", "question": f"q{step}"}])
        assert not buf.end_step(step)
    assert len(buf) == 9
    drawn = buf.sample(4, random.Random(0))
    assert len({d["key"] for d in drawn}) == 4  # without replacement while it lasts
    assert len(buf.sample(20, random.Random(0))) == 20  # then drawn again
    buf.add([{"key": "10:0"}])
    assert buf.end_step(10) and len(buf) == 0 and buf.sample(3, random.Random(0)) == []
    buf.add([{"key": "11:0"}])
    assert not buf.end_step(11) and len(buf) == 1


def test_replay_caps_the_repeats_of_a_question_per_solver_batch():
    """At a 1-6% valid rate the buffer holds a few questions; 50 failed slots once drew each of 3
    questions ~17 times in one batch. The default cap (ssp.replay_max_repeats 2) fills 6 slots."""
    from trainer.config import load_config
    from trainer.methods.ssp import Slot, assign_questions
    from trainer.methods.ssp_tasks import FilterResult

    buffer = ReplayBuffer(reset_every=10)
    buffer.add([{"key": f"1:{i}", "question": f"old {i}?", "answer": "Lima"} for i in range(3)])
    drawn = buffer.sample(50, random.Random(0), max_repeats=2)
    assert len(drawn) == 6 and max(Counter(d["key"] for d in drawn).values()) == 2
    assert len(buffer.sample(50, random.Random(0))) == 50  # no cap: the old behaviour
    with pytest.raises(ValueError, match="max_repeats"):
        buffer.sample(5, random.Random(0), max_repeats=0)
    sec = load_config({"method": "ssp"}).ssp
    assert sec.replay_max_repeats == 2
    slots = [Slot(f"5:{i}", "Paris", 2, i, filter=FilterResult(False, "too_short")) for i in range(50)]
    assign_questions(slots, buffer, sec, random.Random(0))
    solved = Counter(s.solve["key"] for s in slots if s.solve)
    assert sum(solved.values()) == 6 and max(solved.values()) == 2
    assert sum(s.solve is None for s in slots) == 44  # beyond the cap the slots stay empty


def test_replay_buffer_dedupes_removes_flagged_and_round_trips():
    buf = ReplayBuffer(reset_every=10, capacity=3)
    buf.add([{"key": k} for k in "abcd"] + [{"key": "d"}])
    assert [e["key"] for e in buf.entries] == ["b", "c", "d"]
    assert buf.remove(["c", "zzz"]) == 1
    again = ReplayBuffer(reset_every=10)
    again.load_state_dict(buf.state_dict())
    assert [e["key"] for e in again.entries] == ["b", "d"]


# ---- review verdicts --------------------------------------------------------------------------

def test_review_state_flags_by_key_and_question_and_survives_a_checkpoint():
    review = ReviewState()
    review.remember("3:1", "Who built Castle Drogo?")
    newly = review.apply([Verdict("task", "3:1", "flag"), Verdict("rubric", "9", "flag"),
                          Verdict("task", "3:2", "approve")])
    assert newly == ["3:1"]
    assert review.is_flagged("3:1") and review.is_flagged(question="who built  castle drogo")
    assert not review.is_flagged("3:2", "Another question?")
    restored = ReviewState()
    restored.load_state_dict(review.state_dict())
    assert restored.is_flagged("3:1") and restored.is_flagged(question="Who built Castle Drogo?")
    restored.remember("3:1", "Who built Castle Drogo?")
    restored.apply([Verdict("task", "3:1", "approve")])
    assert not restored.is_flagged("3:1", "Who built Castle Drogo?")


# ---- answers to start from --------------------------------------------------------------------

def test_corpus_answers_are_titles_or_short_spans():
    assert title_answer("Mercury (planet)", 5) == "Mercury"
    assert title_answer("List of the largest cities of the world by population", 5) is None
    spans = span_answers("The Eiffel Tower was built in 1889 by Gustave Eiffel in Paris.", 4)
    assert "Eiffel Tower" in spans and "1889" in spans and "Gustave Eiffel" in spans and "Paris" in spans
    assert "The" not in spans
    rng = random.Random(0)
    picks = {corpus_answer("Eiffel Tower", "Built in 1889 by Gustave Eiffel.", rng, 0.5, 4) for _ in range(40)}
    assert "Eiffel Tower" in picks and picks & {"1889", "Gustave Eiffel"}
    assert corpus_answer("", "nothing capitalised here", rng, 0.5, 4) is None


# Document excerpts of .gpu_assets/wiki.jsonl whose spans were drawn as answers in the H100 run ssp15:
# 46 of its 288 answers were such non-names ("Unlike", "Based", "Almost", "Ron Weasley and Hermione", ...),
# targets no question can have.
@pytest.mark.parametrize("text, bad, good", [
    ("the brain and spinal cord and the rest of the body. Unlike the CNS, the PNS is not protected by the "
     "vertebral column and skull.", ["Unlike the CNS", "Unlike"], []),
    ("as most drugs are now manufactured by pharmaceutical industries. Based on the setting, pharmacy practice "
     "is either classified as community or institutional.", ["Based"], []),
    ("the transportation of oxygen in red blood cells. Almost all vertebrates contain hemoglobin, with the sole "
     "exception of the fish family Channichthyidae.", ["Almost"], ["Channichthyidae"]),
    ("the lives of a young wizard, Harry Potter, and his friends, Ron Weasley and Hermione Granger, among "
     "others.", ["Ron Weasley and Hermione", "Ron Weasley and Hermione Granger"], ["Harry Potter"]),
    ("containing the four Gospels of the New Testament together with various prefatory texts.",
     ["Gospels of the New"], ["Gospels of the New Testament"]),
    ("Metropolis is a 1927 German expressionist science-fiction silent film directed by Fritz Lang.",
     ["1927 German"], ["Fritz Lang"]),
    ("The province is Indonesia's main tourist destination, with a rise in tourism since the 1980s.",
     ["Indonesia's"], ["Indonesia"]),
    ("its exact meanings are often debated. Anthropologist Robin Fox says that the study of kinship is the "
     "study of what humans do.", ["Anthropologist Robin Fox"], ["Robin Fox"]),
    ("Vaccines contain a microorganism or virus in a weakened state. In 1796 Edward Jenner used cowpox.",
     ["Vaccines"], ["1796", "Edward Jenner"]),
])
def test_span_answers_skip_sentence_openers_coordinations_and_cut_runs(text, bad, good):
    spans = span_answers(text, 5)
    assert not set(bad) & set(spans) and set(good) <= set(spans)


def test_a_sentence_opener_that_the_text_also_capitalises_mid_sentence_is_a_name():
    spans = span_answers("Pausanias wrote a guide. The guide of Pausanias covers Olympia. 1889 was a year.", 4)
    assert "Pausanias" in spans and "Olympia" in spans and "1889" in spans


def test_load_answers_txt_and_jsonl(tmp_path):
    (tmp_path / "a.txt").write_text("Paris\n\nCastle Drogo\n")
    assert load_answers(tmp_path / "a.txt") == ["Paris", "Castle Drogo"]
    (tmp_path / "a.jsonl").write_text('{"answer": "Io"}\n{"answer": 1889}\n')
    assert load_answers(tmp_path / "a.jsonl") == ["Io", "1889"]
    (tmp_path / "bad.jsonl").write_text('{"answer": "Io"}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        load_answers(tmp_path / "bad.jsonl")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_answers(tmp_path / "missing.txt")


# ---- batch refill ------------------------------------------------------------------------------

def test_failed_slots_are_refilled_from_the_buffer_and_valid_ones_solve_their_own():
    from trainer.config import load_config
    from trainer.methods.ssp import Slot, assign_questions
    from trainer.methods.ssp_tasks import FilterResult

    sec = load_config({"method": "ssp"}).ssp
    ok, bad = FilterResult(True, "ok"), FilterResult(False, "too_short")
    slots = [Slot("5:0", "Paris", 2, 0, filter=ok, question="Q0", rag_ok=True),
             Slot("5:1", "Rome", 2, 1, filter=ok, question="Q1", rag_ok=False),  # failed the RAG check
             Slot("5:2", "Oslo", 2, 2, filter=bad, question="Q2")]
    buffer = ReplayBuffer(reset_every=10)
    buffer.add([{"key": "3:7", "question": "old?", "answer": "Lima"}])
    assign_questions(slots, buffer, sec, random.Random(0))
    assert slots[0].solve == {"key": "5:0", "question": "Q0", "answer": "Paris", "replayed": False}
    assert slots[1].solve == slots[2].solve == {"key": "3:7", "question": "old?", "answer": "Lima", "replayed": True}
    empty = [Slot("6:0", "Paris", 2, 0, filter=bad)]
    assign_questions(empty, ReplayBuffer(reset_every=10), sec, random.Random(0))
    assert empty[0].solve is None  # nothing to replay yet: the slot stays empty
    sec.batch_fill = "none"
    no_fill = [Slot("6:1", "Paris", 2, 0, filter=bad)]
    assign_questions(no_fill, buffer, sec, random.Random(0))
    assert no_fill[0].solve is None


# ---- end to end on a tiny model -----------------------------------------------------------------

import json  # noqa: E402

from trainer.runner import run  # noqa: E402
from trainer.tools.bm25 import InMemoryRetriever  # noqa: E402
from trainer.tools.corpus import Document, JsonlDocumentSource  # noqa: E402

DOCS = [Document("d1", "Castle Drogo", "Castle Drogo is a country house in Devon. It was designed by the architect "
                 "Edwin Lutyens for Julius Drewe and built between 1911 and 1930."),
        Document("d2", "Hestercombe House", "The Edwardian garden of Hestercombe House was laid out by Gertrude Jekyll "
                 "and Edwin Lutyens between 1904 and 1906."),
        Document("d3", "Julius Drewe", "Julius Drewe founded the Home and Colonial Stores and retired a rich man "
                 "at 33."),
        Document("d4", "Devon", "Devon is a county in South West England between Cornwall and Dorset.")]


def _rows(run_dir, name):
    return [json.loads(line) for line in (run_dir / name).read_text().splitlines()]


def _ssp_config(tiny_config, model_dir, **ssp):
    return tiny_config("ssp", model={"name_or_path": str(model_dir), "lora": {"r": 0}},
                       rollout={"max_new_tokens": 48, "temperature": 1.0, "group_size": 2},
                       train={"steps": 3, "prompts_per_step": 2, "lr": 1e-4, "micro_batch_size": 8, "device": "cpu"},
                       ssp={"max_turns": 3, "judge": "exact", "mini_batch_size": 1, "rag_max_new_tokens": 16,
                            "max_prompt_tokens": 512, **ssp})


def _run(cfg, run_dir):
    return run(cfg, retriever=InMemoryRetriever(DOCS), documents=JsonlDocumentSource(DOCS), run_dir=run_dir)


def test_ssp_runs_three_steps_on_a_random_model_and_reports_every_question(tiny_config, tiny_model_dir, tmp_path):
    result = _run(_ssp_config(tiny_config, tiny_model_dir), tmp_path / "run")
    assert result.steps == 3
    samples = _rows(tmp_path / "run", "samples.jsonl")
    tasks = [r for r in samples if r["kind"] == "task"]
    assert len(tasks) == 6 and len({t["key"] for t in tasks}) == 6
    assert all(not t["valid"] and t["data"]["filter_reason"] != "ok" for t in tasks)  # no closed tag -> filtered
    proposer = [r for r in samples if r["kind"] == "attempt" and r["role"] == "proposer"]
    assert len(proposer) == 6 and all(p["reward"] == 0.0 for p in proposer)  # filtered: 0, not a penalty
    assert all(len(p["token_ids"]) <= 48 and len(p["loss_mask"]) == len(p["token_ids"]) for p in proposer)
    metrics = _rows(tmp_path / "run", "metrics.jsonl")
    assert {m["role"] for m in metrics} == {"proposer", "solver", "system"}
    assert [m["step"] for m in metrics if m["role"] == "proposer"] == [1, 2, 3]
    assert all(m["zero_variance_groups"] == 0.0 for m in metrics if m["role"] == "solver")  # nothing solved


QUESTION = ("Which country house in Devon was designed by the garden architect of Hestercombe for the founder "
            "of the Home and Colonial Stores?")


RAG_REPLY = "Lutyens built it.\nAnswer: Castle Drogo"


def ssp_lessons(tok, retriever, top_k: int = 1, max_prompt_tokens: int = 512, rag_reply: str = RAG_REPLY) -> list:
    """What a tiny model must be taught for the SSP valid path over ``retriever``: for "Castle
    Drogo", two searches then QUESTION; for "Devon", a too-short question at once; the RAG
    answer for every order of the passages found; a Solver answer right half of the time."""
    import itertools

    from tests.trainer.taught import pair
    from trainer.methods.ssp import rag_prompt
    from trainer.methods.ssp_tasks import PROPOSER_SYSTEM, PROPOSER_USER, SOLVER_SYSTEM, SOLVER_USER, unique_passages
    from trainer.prompts import chat
    from trainer.rollout.multi_turn import LAST_TURN
    from trainer.tools.search import SearchTool

    enc = lambda text: tok.encode(text, add_special_tokens=False)  # noqa: E731
    tool = SearchTool(retriever, k=top_k, tokenizer=tok)
    found = [tool.search([q])[0] for q in ("lutyens garden", "home colonial stores")]
    last = "\n\n" + tool.message(LAST_TURN.format(f="question"))  # the second search is the turn before the last
    info = [enc(f"\n\n{tool.format(p)}{note}\n\n") for p, note in zip(found, ("", last))]
    good = [(chat(tok, PROPOSER_SYSTEM, PROPOSER_USER.format(answer="Castle Drogo", n=2)), False),
            (enc("<search> lutyens garden </search>"), True), (info[0], False),
            (enc("<search> home colonial stores </search>"), True), (info[1], False),
            (enc(f"<question> {QUESTION} </question>"), True)]
    short = pair(chat(tok, PROPOSER_SYSTEM, PROPOSER_USER.format(answer="Devon", n=2)),
                 enc("<question> Who? </question>"))
    passages = unique_passages([p for ps in found for p in ps])
    rag = [pair(rag_prompt(tok, list(order), QUESTION, max_prompt_tokens),
                enc(rag_reply) + [tok.eos_token_id])
           for order in itertools.permutations(passages)]
    asked = chat(tok, SOLVER_SYSTEM, SOLVER_USER.format(question=QUESTION))
    solver = [pair(asked, enc(f"<answer> {a} </answer>")) for a in ("Castle Drogo", "Devon")]  # 50/50
    return [good, short, *rag, *solver]


def taught_ssp_config(tiny_config, model_dir, tmp_path) -> dict:
    answers = tmp_path / "answers.txt"
    answers.write_text("Castle Drogo\nDevon\n")
    cfg = _ssp_config(tiny_config, model_dir, answer_source="list", answers_path=str(answers), required_searches=[2],
                      top_k=1, rag_max_new_tokens=24, judge="frozen_base",  # asked whenever exact match fails
                      judge_max_new_tokens=16)
    cfg["rollout"].update(temperature=0.3, max_new_tokens=320)
    return cfg


def check_taught_ssp_run(run_dir) -> None:
    """One question per step passes the filter and the RAG check, the other slot is refilled from
    the replay buffer from step 2 on, the Solver trains on both, and the Proposer's reward is
    1 - the Solver's mean."""
    samples = _rows(run_dir, "samples.jsonl")
    tasks = {t["key"]: t for t in samples if t["kind"] == "task"}
    valid = [t for t in tasks.values() if t["valid"]]
    assert valid and all(t["answer"] == "Castle Drogo" and t["data"]["rag_verdict"] is True for t in valid)
    assert all(t["data"]["queries"] == ["lutyens garden", "home colonial stores"] for t in valid)
    short_ones = [t for t in tasks.values() if t["answer"] == "Devon"]
    assert short_ones and all(t["data"]["filter_reason"] == "too_short" for t in short_ones)
    attempts = [r for r in samples if r["kind"] == "attempt"]
    rewards = {a["task_key"]: a["reward"] for a in attempts if a["role"] == "proposer"}
    for t in valid:  # the Proposer's reward is 1 - the mean of its own question's Solver rewards, less its template
        # cluster's share (the task gate, R-Zero's max(0, r - |C|/B)): one question asked in every slot
        own = [a["reward"] for a in attempts if a["role"] == "solver" and a["data"]["slot"] == t["key"]]
        share = t["data"]["cluster_share"]
        assert own and share > 0 and rewards[t["key"]] == pytest.approx(max(0.0, 1 - sum(own) / len(own) - share))
    assert all(rewards[t["key"]] == 0.0 for t in short_ones)
    replayed = [t for t in short_ones if t["data"]["solved_question"]]
    assert replayed and all(tasks[t["data"]["solved_question"]]["valid"] for t in replayed)
    assert all(tasks[t["data"]["solved_question"]]["step"] < t["step"] for t in replayed)
    assert {a["reward"] for a in attempts if a["role"] == "solver"} == {0.0, 1.0}
    metrics = _rows(run_dir, "metrics.jsonl")
    proposer = [m for m in metrics if m["role"] == "proposer"]
    assert proposer and all("judge_failure_rate" in m for m in proposer)  # rows to check, each with the rate
    assert any(m["role"] == "solver" and m["skipped"] < m["samples"] for m in metrics)
    assert any(m["role"] == "proposer" and m["replayed_slots"] > 0 for m in metrics)


def test_ssp_valid_path_with_a_model_taught_to_search_and_ask(tiny_config, tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer

    from tests.trainer.taught import teach

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    taught = teach(tiny_model_dir, tmp_path / "taught", ssp_lessons(tok, InMemoryRetriever(DOCS)))
    result = _run(taught_ssp_config(tiny_config, taught, tmp_path), tmp_path / "run")
    assert result.steps == 3
    check_taught_ssp_run(tmp_path / "run")


# ---- issue 18: the Solver's advantage (Eq. 4) and the RAG check's materials ------------------------

def _solved_slot(rewards):
    from trainer.methods.ssp import Slot
    from trainer.methods.ssp_tasks import FilterResult
    from trainer.rollout.types import Trajectory

    traj = lambda: Trajectory(prompt_ids=[1, 2], completion_ids=[3, 4], loss_mask=[1, 1], logprobs=[0.0, 0.0])  # noqa: E731
    slot = Slot("1:0", "Paris", 2, 0, filter=FilterResult(True, "ok"), question="Q?", rag_ok=True, proposer=traj())
    slot.solver, slot.solver_rewards = [traj() for _ in rewards], list(rewards)
    return slot


def test_solver_advantage_is_eq4_r_minus_the_group_mean_by_default():
    from trainer.config import load_config
    from trainer.methods.ssp import SOLVER, build_samples

    sec = load_config({"method": "ssp"}).ssp
    assert sec.solver_advantage == "dr_grpo"
    _, solver = build_samples([_solved_slot([1, 0, 0, 0, 0])], sec, 5)
    # Eq. 4: A = r - mean, mean = 1/5 -> 1 - 0.2 = +0.8, 0 - 0.2 = -0.2 (no std division)
    assert [s.role for s in solver[0]] == [SOLVER] * 5
    assert [round(s.advantage, 6) for s in solver[0]] == [0.8, -0.2, -0.2, -0.2, -0.2]
    sec.solver_advantage = "grpo"  # verl's GRPO default: / sample std = sqrt(0.2) = 0.4472 -> +1.789 / -0.447
    _, solver = build_samples([_solved_slot([1, 0, 0, 0, 0])], sec, 5)
    assert [round(s.advantage, 2) for s in solver[0]] == [1.79, -0.45, -0.45, -0.45, -0.45]


def test_rag_materials_drop_noise_first_and_keep_all_the_proposers_evidence(smollm2_tokenizer):
    from trainer.config import load_config
    from trainer.methods.ssp import rag_budget, rag_materials, rag_prompt

    long = "lorem ipsum dolor sit amet " * 12  # ~70 tokens a passage
    own = [P(f"own{i}", text=f"EVIDENCE{i} {long}") for i in range(3)]
    others = [[P(f"noise{i}", text=f"NOISE{i} {long}") for i in range(6)]]
    q = GOOD_Q
    sec = load_config({"method": "ssp", "ssp": {"max_prompt_tokens": 400, "rag_noise_passages": 4}}).ssp
    budget = rag_budget(smollm2_tokenizer, q, sec.max_prompt_tokens)
    assert budget < 7 * 75  # all seven passages cannot fit: some must go
    for seed in range(8):  # before: shuffled, then the text cut at the budget (own evidence lost in some orders)
        materials, noise = rag_materials(smollm2_tokenizer, own, others, q, sec, random.Random(seed))
        assert {p.document_id for p in own} <= {p.document_id for p in materials}
        assert len(noise) < 4 and sorted(p.document_id for p in materials) == sorted(p.document_id for p in own + noise)
        text = smollm2_tokenizer.decode(rag_prompt(smollm2_tokenizer, materials, q, sec.max_prompt_tokens))
        assert all(f"EVIDENCE{i}" in text for i in range(3))


def test_fit_materials_drops_the_last_drawn_noise_and_keeps_the_order():
    from trainer.methods.ssp_tasks import fit_materials

    own, noise = [P("a"), P("b")], [P("x"), P("y"), P("z")]
    materials = [noise[0], own[0], noise[2], own[1], noise[1]]  # shuffled
    count = lambda ps: 10 * len(ps)  # noqa: E731  10 tokens a passage
    kept, left = fit_materials(materials, noise, count, 35)  # room for 3: z then y leave
    assert [p.document_id for p in kept] == ["x", "a", "b"] and [p.document_id for p in left] == ["x"]
    kept, left = fit_materials(own, [], count, 5)  # own passages alone overflow: kept (the prompt cuts their text)
    assert kept == own and left == []


def test_the_rag_check_samples_at_the_reference_codes_temperature():
    from trainer.config import load_config

    sec = load_config({"method": "ssp"}).ssp
    assert (sec.rag_temperature, sec.rag_max_new_tokens, sec.judge_max_new_tokens) == (0.1, 256, 1024)


# ---- issue 21 (4c): the Proposer's half outside a run (benchmarks/gpu/ssp_eval.py make-questions) ----------

@pytest.mark.parametrize("rag_reply", [RAG_REPLY, "Castle Drogo"])  # no 'Answer:', as 22 of the 34 checks of run ssp15
def test_propose_questions_is_the_recipes_proposer_half_callable_on_a_loaded_model(tiny_config, tiny_model_dir,
                                                                                   tmp_path, rag_reply):
    """The held-out question set is made by the recipe's own code on a model loaded for evaluation (no
    RecipeContext): search trajectories, rule filter, RAG check; ``Slot.valid`` marks what a run keeps.
    (The bare RAG reply is taught on top of the model taught the default lessons, the valid-path test's: about
    56 fitting steps instead of 106 from the random model.)"""
    from dataclasses import replace
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from tests.trainer.taught import teach
    from trainer.config import load_config
    from trainer.evaluate import load_model
    from trainer.methods.ssp import propose_questions
    from trainer.rollout import SamplingParams
    from trainer.tools.search import SearchTool

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    retriever = InMemoryRetriever(DOCS)
    taught = teach(tiny_model_dir, tmp_path / "taught", ssp_lessons(tok, retriever))  # taught once in this process
    if rag_reply != RAG_REPLY:
        taught = teach(taught, tmp_path / "taught-reply", ssp_lessons(tok, retriever, rag_reply=rag_reply))
    cfg = load_config(taught_ssp_config(tiny_config, taught, tmp_path))
    loaded = load_model(str(taught), device="cpu")
    sampling = SamplingParams(temperature=0.0, max_new_tokens=cfg.rollout.max_new_tokens, logprobs=False)
    ctx = SimpleNamespace(config=SimpleNamespace(ssp=cfg.ssp, rollout=cfg.rollout), generator=loaded.generator,
                          policy=SimpleNamespace(tokenizer=loaded.tokenizer),
                          sampling_params=lambda **kw: replace(sampling, **kw))
    review = ReviewState()
    slots = propose_questions(ctx, SearchTool(retriever, k=1, tokenizer=loaded.tokenizer), None,
                              [("Castle Drogo", "d1"), ("Devon", "d4")], random.Random(0), step=7, review=review)
    assert [s.key for s in slots] == ["7:0", "7:1"] and [s.n_searches for s in slots] == [2, 2]
    good, short = slots
    assert good.valid and good.question == QUESTION and good.rag_ok is True and good.rag_answer == "Castle Drogo"
    assert good.proposer.queries == ["lutyens garden", "home colonial stores"] and good.doc_id == "d1"
    assert not short.valid and short.filter.reason == "too_short" and short.rag_ok is None
    review.apply([Verdict(kind="task", key="7:0", verdict="flag")])  # a flagged question is filtered when written again
    again = propose_questions(ctx, SearchTool(retriever, k=1, tokenizer=loaded.tokenizer), None,
                              [("Castle Drogo", "d1")], random.Random(0), step=8, review=review)
    assert again[0].question == QUESTION and not again[0].valid and again[0].filter.reason == "flagged"


def test_make_cloze_writes_a_proposer_independent_held_out_set(tmp_path):
    """ssp_eval.py make-cloze: held-out cloze items from documents (no model), each answerable from its document;
    a missing documents file is a clear error with exit 2."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "ssp_eval.py"
    docs = tmp_path / "heldout.jsonl"
    docs.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in DOCS))
    out = tmp_path / "cloze.jsonl"
    done = subprocess.run([sys.executable, str(script), "make-cloze", "--docs", str(docs), "--n", "5", "--out", str(out)],
                          capture_output=True, text=True, env={"OUT": str(tmp_path / "out"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    items = [json.loads(line) for line in out.read_text().splitlines()]
    texts = {d.id: d.text for d in DOCS}
    assert items and len(items) <= min(5, len(DOCS))
    for it in items:
        assert "____" in it["question"] and it["answer"] in texts[it["document_id"]]
    bad = subprocess.run([sys.executable, str(script), "make-cloze", "--docs", str(tmp_path / "none.jsonl")],
                         capture_output=True, text=True, env={"OUT": str(tmp_path / "out"), "PATH": "/usr/bin:/bin"})
    assert bad.returncode == 2 and "does not exist" in bad.stderr


def test_zero_variance_groups_counts_groups_of_two_or_more_with_equal_rewards():
    from trainer.methods.parts import zero_variance_groups

    assert zero_variance_groups([[1, 1, 1], [0, 1, 0], [0.5, 0.5]]) == pytest.approx(2 / 3)
    assert zero_variance_groups([[1], [0, 1]]) == 0.0 and zero_variance_groups([]) == 0.0


def test_the_proposer_prompt_shows_a_whole_reply_for_another_answer():
    """A 1.5B Proposer without a shown reply wrote no <question>, or searched never or once, in most
    trajectories (run ssp15): the prompt shows think / search / question in order, for an answer that
    is not the one asked, and repeats the number of searches asked."""
    from trainer.methods.ssp_tasks import PROPOSER_USER

    text = PROPOSER_USER.format(answer="Castle Drogo", n=3)
    at = 0
    for tag in ("<think>", "<search>", "</search>", "<think>", "<search>", "</search>", "<question>", "</question>"):
        at = text.index(tag, at) + len(tag)  # each in its turn, after the one before
    assert text.count("</search>") == 2 and "Castle Drogo" not in text.split("The shape of your reply")[1]
    assert "Make exactly 3 searches" in text


def test_a_question_restating_the_proposers_example_is_refused():
    """Run sg (2026-11-28): the 1.5B Proposer wrote its prompt's example question word for word for unrelated
    answers; 38 of 99 rule-passing questions of its first 9 steps shared more than half their 6-grams with the
    prompt. A question written from the answer passes."""
    from trainer.methods.gate import copies_prompt_example
    from trainer.methods.ssp_tasks import PROPOSER_EXAMPLES, PROPOSER_SYSTEM, PROPOSER_USER

    assert len(PROPOSER_EXAMPLES) == 5 and all(e in PROPOSER_SYSTEM + PROPOSER_USER for e in PROPOSER_EXAMPLES)
    copies = ["Which river flows through the city where Mozart composed his unfinished Requiem mass?",  # gold: Documentary film
              "Which river flows through the capital of the country where the inventor of the first practical "
              "telephone exchange switchboard was born?",  # gold: Discus throw
              "Which city hosted the 1932 Summer Olympics where the inventor of the first practical telephone "
              "switchboard was born?"]  # gold: Collard
    assert all(copies_prompt_example(q, PROPOSER_EXAMPLES) for q in copies)
    healthy = ["Which organ system is known for its role in maintaining the circulatory system and distributing "
               "water and nutrients?",  # gold: Lymphatic system, validated in the same run
               "Which archipelago off West Africa was named after the westernmost point of the continent?"]
    assert not any(copies_prompt_example(q, PROPOSER_EXAMPLES) for q in healthy)
    assert not copies_prompt_example(copies[0], PROPOSER_EXAMPLES, limit=1.0)  # 1 turns the rule off


# ---- issue 32: a reviewer's task edit reaches the recipe ------------------------------------------

class PromptLog:
    """The run's real generator, with the prompts it was asked to continue noted (decoded) on the way."""

    def __init__(self, generator, tokenizer):
        self.inner, self.tok, self.prompts = generator, tokenizer, []

    def generate(self, prompts, *args, **kwargs):
        self.prompts += [self.tok.decode(p) for p in prompts]
        return self.inner.generate(prompts, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_an_edited_task_reaches_the_replay_buffer_and_the_solvers_next_batch(tiny_config, tiny_model_dir, tmp_path):
    """A reviewer corrects a buffered question and its gold answer (a task Verdict with an edit, handed over by
    the sink after step 1): from step 2 on the replay buffer holds the corrected question and answer under the
    same key, and the Solver's batch of step 2 asks the corrected question, no longer the old one. (The random
    tiny model writes no valid question: every slot is refilled from the buffer, seeded as a resumed run's.)"""
    import json as _json

    from trainer.config import load_config
    from trainer.context import RecipeContext
    from trainer.engine import make_engine
    from trainer.methods.ssp import run_ssp
    from trainer.models import load_policy
    from trainer.runner import make_generator
    from trainer.sink import Control, JsonlSink

    old_q, new_q = "Who built the house in Devon for the grocer?", "Which architect designed Castle Drogo?"
    edit = Verdict("task", "0:t0", "approve", edit=_json.dumps({"question": new_q, "answer": "Edwin Lutyens"}))

    class ReviewSink(JsonlSink):  # what the web's sink does: verdicts handed over once, at a step's end
        def __init__(self, run_dir):
            super().__init__(run_dir)
            self.queue, self.prompts_before = [edit], None

        def control(self):
            if self.prompts_before is None:
                self.prompts_before = len(log.prompts)  # everything step 1 asked
            out, self.queue = self.queue, []
            return Control(verdicts=out)

    cfg = load_config(_ssp_config(tiny_config, tiny_model_dir, replay_reset_every=10,
                                  **{"max_turns": 1}) | {"checkpoint": {"every": 0, "final": False}})
    cfg.train.steps = 2
    policy = load_policy(cfg)
    log = PromptLog(make_generator(cfg, policy), policy.tokenizer)
    sink = ReviewSink(tmp_path / "run")
    ctx = RecipeContext(config=cfg, policy=policy, generator=log, engine=make_engine(cfg, policy), sink=sink,
                        retriever=InMemoryRetriever(DOCS), documents=JsonlDocumentSource(DOCS), run_dir=tmp_path / "run")
    ctx.state["replay"] = {"reset_every": 10, "entries": [{"key": "0:t0", "question": old_q, "answer": "Lutyens",
                                                           "step": 0}]}
    run_ssp(ctx)

    assert ctx.state["replay"]["entries"] == [{"key": "0:t0", "question": new_q, "answer": "Edwin Lutyens", "step": 0}]
    assert ctx.state["review"]["edits"] == {"0:t0": {"question": new_q, "answer": "Edwin Lutyens"}}
    step1, step2 = log.prompts[:sink.prompts_before], log.prompts[sink.prompts_before:]
    assert any(old_q in p for p in step1) and not any(new_q in p for p in step1)
    assert any(new_q in p for p in step2) and not any(old_q in p for p in step2)  # the Solver asks the edited one
    samples = _rows(tmp_path / "run", "samples.jsonl")
    solver = [r for r in samples if r["kind"] == "attempt" and r["role"] == "solver"]
    assert {r["step"] for r in solver} == {1, 2} and all(r["task_key"] == "0:t0" and r["data"]["replayed"]
                                                          for r in solver)
