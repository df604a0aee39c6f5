"""SSP: Search Self-Play (ssp.txt, Algorithm 1; reference code Alibaba-Quark/SSP).

One model plays two roles. Per step, for ``train.prompts_per_step`` answers (document titles
and short named spans of the corpus by default, or a user list, ``ssp.answer_source``):

1. Proposer: told the answer and a number of searches n (``ssp.required_searches``), it
   searches (multi-turn, ``<search>`` / ``<information>``) and writes ``<question>``.
2. Rule filter (trainer/methods/ssp_tasks.py): a question, 10-1000 characters, >= 10 words,
   the answer not in it, >= 2 searches, no repeated query. Then the RAG check: the policy,
   without search, reads every passage the Proposer retrieved plus 4 noise passages from the
   batch's other Proposer trajectories, and must answer correctly for the question to stay
   (its answer: what follows 'Answer:', else the whole reply, as the reference code judges it).
3. Slots whose question failed are refilled from a replay buffer of earlier validated
   questions, cleared every ``ssp.replay_reset_every`` steps (trainer/methods/replay.py).
4. Solver: ``rollout.group_size`` (5) search trajectories per question ending in ``<answer>``.
   Reward 1/0: normalized exact match, else the judge (the frozen base by default, an
   OpenAI-compatible endpoint, or exact match only); more than 10 answer tags -> / 4.
5. Proposer reward 1 - mean(solver rewards) for its own validated question, 0 for a filtered
   or RAG-failed one. Solver: r - group mean per question (Eq. 4, ``ssp.solver_advantage``);
   Proposer REINFORCE (raw reward). KL 0.01 (k3)
   and clip-high 0.285 come from the section's shared defaults. Each role is updated in
   mini-batches of ``ssp.mini_batch_size`` prompts (one optimizer step each).

Human review: a flagged question leaves the replay buffer, never trains the Solver again and
is filtered (reward 0) if the Proposer writes it again; the flagged set and the buffer are
checkpointed.

Token budgets: Proposer and Solver trajectories ``rollout.max_new_tokens`` (paper 8192), the RAG
check ``rag_max_new_tokens``, a judge verdict ``judge_max_new_tokens``; each role's truncation
rate is a metric (``truncated_rate``; roles ``rag`` and ``judge`` for the untrained ones). Run it::

    python -m trainer run examples/ssp_cpu.yaml --out var/runs/ssp-cpu

Departures from the paper (and its reference code, Alibaba-Quark/SSP):
- noise is ``rag_noise_passages`` single passages from the batch's other trajectories, not their
  whole materials; materials that overflow ``max_prompt_tokens`` lose noise first, and the
  Proposer's own passages are cut only when they alone overflow (the reference cuts nothing);
- the RAG check is the policy answering without search (as the paper says) at temperature
  ``rag_temperature`` 0.1 and ``rag_max_new_tokens`` 256 (the reference asks an external LLM at
  0.1 with 70 tokens; the paper gives no setting);
- the judge is the frozen base by default (the paper: an LLM judge; an OpenAI-compatible endpoint
  or exact match are options) with ``judge_max_new_tokens`` 1024 (the reference's one-word judge: 10);
- answers come from the corpus: titles and short named spans (the paper: a prepared answer set;
  ``answer_source=list`` takes one); a span is a whole capitalised run of at most
  ``answer_max_words`` words, never a word capitalised only because it opens a sentence, never an
  "X and Y" coordination (run ssp15 drew "Unlike", "Based", "Ron Weasley and Hermione", "Gospels of
  the New" for 46 of 288 Proposer prompts: no question can lead to them);
- loss: token mean over each mini-batch (``train.loss_agg``), where Eq. 4 averages each
  trajectory's tokens, then the group; the Solver's advantage is Eq. 4's r - group mean
  (``solver_advantage``; the appendix's "GRPO" would divide by the std in verl);
- the task gate refuses a question restating one of the prompt's example questions (``copies_example``,
  ``gate.example_copy_ratio``) or copying its search results (``copy_ratio``): ours, after run sg's
  Proposer wrote the prompt's example word for word for unrelated answers;
- an answer sharing no content word with its gold is Wrong without asking the judge
  (``judge_needs_shared_word``, on by default; ours): the frozen 1.5B base judge accepted such answers
  ("The Dnieper River flows ..." for "Semen"), so most of run sg's "valid" questions and 14 of the
  Solver's 38 accepted answers were the judge's false positives;
- searching rollouts keep ``rollout.answer_reserve_tokens`` (default a quarter of the budget) for the
  Proposer's question and the Solver's answer:
  search results are cut to keep it, and a search with no room left is refused with a note; the result of
  a search in the turn before the last says it was the last search (``multi_turn.LAST_TURN``) (ours; the
  paper states none);
- a replayed question fills at most ``replay_max_repeats`` (2) slots of one Solver batch (ours; the
  paper's buffer has no cap): slots beyond it stay empty (``empty_slots``). The periodically reset
  buffer itself is the paper's main setting (Table 5, "Replay Buffer (Periodic Reset)"), not a
  departure.
"""
from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field

import torch

from trainer.algos import get_advantage
from trainer.judge import key_env, make_judge
from trainer.methods.parts import (mini_batches, searches_refused, truncated_rate, update_in_mini_batches,
                                   zero_variance_groups)
from trainer.methods.replay import ReplayBuffer
from trainer.methods.review import ReviewState
from trainer.methods.ssp_tasks import (
    PROPOSER_EXAMPLES,
    PROPOSER_SYSTEM,
    PROPOSER_USER,
    RAG_PROMPT,
    SOLVER_SYSTEM,
    SOLVER_USER,
    FilterResult,
    corpus_answer,
    fit_materials,
    format_materials,
    load_answers,
    mix_noise,
    parse_rag_answer,
    rule_filter,
)
from trainer.prompts import chat
from trainer.methods.gate import (
    cluster_shares,
    content_words,
    copies_prompt_example,
    copy_ratio,
    family_shares,
    template_clusters,
    template_penalty,
)
from trainer.rewards import control_rewards, ssp_proposer, ssp_solver
from trainer.rollout.multi_turn import multi_turn_rollout
from trainer.tools.search import SearchTool
from trainer.tools.corpus import truncate_to_tokens
from trainer.update import Sample
from trainer.verify import exact_match

PROPOSER, SOLVER, RAG, JUDGE = "proposer", "solver", "rag", "judge"


@dataclass
class Slot:
    """One Proposer trajectory and the question the Solver works on in its place."""

    key: str
    answer: str
    n_searches: int
    group: int  # index of its answer (proposer_samples slots share one)
    doc_id: str | None = None
    proposer: object = None  # Trajectory
    question: str | None = None
    filter: FilterResult = FilterResult(False, "no_question")
    rag_materials: list = field(default_factory=list)
    rag_noise: list = field(default_factory=list)
    rag: object = None  # Completion of the RAG check
    rag_answer: str | None = None
    rag_ok: bool | None = None
    solve: dict | None = None  # {"key", "question", "answer", "replayed"}
    solver: list = field(default_factory=list)  # Trajectories
    solver_rewards: list[float] = field(default_factory=list)  # what the Solver is rewarded by (a control: coins)
    graded: list[float] | None = None  # the Solver's rewards by the judge's verdicts, kept when a control flips coins
    cluster_share: float = 0.0  # the question's template cluster's share of the step's valid questions (task gate)
    reward: float = 0.0

    @property
    def valid(self) -> bool:
        return self.filter.ok and self.rag_ok is not False


# ---- answers to start from ----------------------------------------------------------------------

def draw_answers(ctx, n: int, rng: random.Random, answer_list: list[str] | None) -> list[tuple[str, str | None]]:
    """n (answer, document id) pairs: from the user list, or titles / spans of random documents."""
    sec = ctx.config.ssp
    if answer_list is not None:
        picks = rng.sample(answer_list, n) if n <= len(answer_list) else [rng.choice(answer_list) for _ in range(n)]
        return [(a, None) for a in picks]
    if ctx.documents is None:
        raise RuntimeError("SSP needs a corpus for its answers: set corpus.path, or ssp.answer_source=list")
    out: list[tuple[str, str | None]] = []
    for _ in range(10):
        for doc in ctx.documents.sample(n - len(out), rng):
            found = corpus_answer(doc.title, doc.text, rng, sec.answer_title_fraction, sec.answer_max_words)
            if found:
                out.append((found, str(doc.id)))
        if len(out) >= n:
            return out[:n]
    raise RuntimeError("could not draw answers from the corpus: its documents have no short titles or named "
                       "spans; use ssp.answer_source=list with ssp.answers_path")


# ---- equivalence: exact match, then the judge ---------------------------------------------------

def judged(judge, items: list[tuple[str, str | None, str]], needs_shared_word: bool = False) -> list[bool]:
    """(question, prediction, gold) -> correct: normalized exact match first, the judge for the rest
    (a judge that fails to answer counts as Wrong). With ``needs_shared_word`` a prediction sharing no content
    word (name, term, number: ``gate.content_words``) with a gold that has some is Wrong without asking."""
    out = [pred is not None and exact_match(pred, gold) for _, pred, gold in items]
    ask = [i for i, (_, pred, _) in enumerate(items) if not out[i] and pred and pred.strip()]
    if needs_shared_word:
        ask = [i for i in ask if shares_a_word(items[i][1], items[i][2])]
    if ask and judge is not None:
        verdicts = judge.equivalent_batch([(items[i][0], items[i][2], items[i][1]) for i in ask])
        for i, v in zip(ask, verdicts):
            out[i] = v is True
    return out


def shares_a_word(prediction: str, gold: str) -> bool:
    """Does ``prediction`` hold a content word of ``gold`` (True when the gold has none: "1", "Ur")? The frozen
    1.5B base, asked as judge, accepted "The Dnieper River flows through the city where Mozart composed his
    Requiem" for the gold "Semen": 14 of the 38 Solver answers it accepted in run sg (2026-11-28, first 9 steps)
    shared no word with their gold."""
    words = content_words(gold)
    return not words or bool(words & content_words(prediction))


# ---- the phases of one step ---------------------------------------------------------------------

def propose(ctx, tool, slots: list[Slot]) -> None:
    sec, tok = ctx.config.ssp, ctx.policy.tokenizer
    prompts = [chat(tok, PROPOSER_SYSTEM, PROPOSER_USER.format(answer=s.answer, n=s.n_searches)) for s in slots]
    params = ctx.sampling_params()
    trajs = multi_turn_rollout(ctx.generator, tok, prompts, params, tool, max_turns=sec.max_turns,
                               query_tag="search", final_tag="question",
                               answer_reserve=ctx.config.rollout.answer_reserve_tokens)
    for s, t in zip(slots, trajs):
        s.proposer, s.question = t, (t.final or "").strip() or None
        s.filter = rule_filter(s.question, s.answer, t.queries, len(t.passages), min_chars=sec.question_min_chars,
                               max_chars=sec.question_max_chars, min_words=sec.question_min_words,
                               min_searches=sec.min_searches)
        gate = getattr(ctx.config, "gate", None)  # a loaded model's ctx has no gate
        limit = getattr(gate, "copy_ratio", 1.0)
        if s.filter.ok and limit < 1 and copy_ratio(s.question, " ".join(_passage_text(p) for p in t.passages)) > limit:
            s.filter = FilterResult(False, "copy_ratio")  # the task gate: a sentence of its search results, a lookup
        example_limit = getattr(gate, "example_copy_ratio", 1.0)
        if s.filter.ok and example_limit < 1 and copies_prompt_example(s.question, PROPOSER_EXAMPLES, example_limit):
            s.filter = FilterResult(False, "copies_example")  # the task gate: the prompt's example, not a question


def _passage_text(p) -> str:
    return getattr(p, "text", None) or (p.get("text", "") if isinstance(p, dict) else str(p))


def control_and_clusters(ctx, slots: list[Slot]) -> list[int]:
    """A random-reward control's coin flips for the Solver (``train.control``; the judge's verdicts kept in
    ``graded``), then the task gate's template clusters over the valid questions: each valid question's Proposer
    reward loses its cluster's share (``gate.template_penalty``). Returns the cluster ids (for the metrics)."""
    gate = ctx.config.gate
    for s in slots:
        s.graded = list(s.solver_rewards)
        s.solver_rewards = control_rewards(ctx, s.solver_rewards)
    valid = [s for s in slots if s.valid and s.question]
    ids = template_clusters([s.question for s in valid], gate.template_similarity)
    for s, share in zip(valid, cluster_shares(ids)):
        s.cluster_share = share
    return ids


def rag_prompt(tokenizer, materials, question: str, max_tokens: int) -> list[int]:
    """The RAG check's prompt, its materials cut so the whole prompt fits ``max_tokens``."""
    text = truncate_to_tokens(format_materials(materials), tokenizer, rag_budget(tokenizer, question, max_tokens))
    return chat(tokenizer, None, RAG_PROMPT.format(materials=text, question=question))


def rag_budget(tokenizer, question: str, max_tokens: int) -> int:
    """Tokens left for the materials once the RAG prompt's own text and the question are counted."""
    head = len(tokenizer.encode(RAG_PROMPT.format(materials="", question=question), add_special_tokens=False))
    return max(max_tokens - head, 16)


def rag_materials(tokenizer, own, others, question: str, sec, rng: random.Random) -> tuple[list, list]:
    """(materials, noise) of one RAG check: the Proposer's passages plus ``rag_noise_passages`` from
    the batch's other trajectories, shuffled; noise leaves first when they overflow the prompt budget."""
    materials, noise = mix_noise(own, others, sec.rag_noise_passages, rng)
    n_tokens = lambda ps: len(tokenizer.encode(format_materials(ps), add_special_tokens=False))  # noqa: E731
    return fit_materials(materials, noise, n_tokens, rag_budget(tokenizer, question, sec.max_prompt_tokens))


def rag_check(ctx, judge, slots: list[Slot], rng: random.Random) -> None:
    """Answer each filtered-in question from its Proposer's passages plus noise, without search."""
    sec, tok = ctx.config.ssp, ctx.policy.tokenizer
    todo = [s for s in slots if s.filter.ok]
    if not sec.rag_check or not todo:
        return
    prompts = []
    for s in todo:
        others = [o.proposer.passages for o in slots if o is not s]
        s.rag_materials, s.rag_noise = rag_materials(tok, s.proposer.passages, others, s.question, sec, rng)
        prompts.append(rag_prompt(tok, s.rag_materials, s.question, sec.max_prompt_tokens))
    params = ctx.sampling_params(temperature=sec.rag_temperature, max_new_tokens=sec.rag_max_new_tokens)
    outs = ctx.generator.generate(prompts, params)
    for s, c in zip(todo, outs):
        s.rag, s.rag_answer = c, parse_rag_answer(c.text)
    verdicts = judged(judge, [(s.question, s.rag_answer, s.answer) for s in todo], sec.judge_needs_shared_word)
    for s, ok in zip(todo, verdicts):
        s.rag_ok = ok


def new_slots(step: int, seeds: list[tuple[str, str | None]], sec, rng: random.Random) -> list[Slot]:
    """``sec.proposer_samples`` slots per (answer, document id), each asked for a number of searches
    drawn from ``sec.required_searches``; keys are ``step:index``."""
    return [Slot(f"{step}:{g * sec.proposer_samples + j}", a, rng.choice(sec.required_searches), g, doc)
            for g, (a, doc) in enumerate(seeds) for j in range(sec.proposer_samples)]


def propose_questions(ctx, tool, judge, seeds: list[tuple[str, str | None]], rng: random.Random, step: int = 0,
                      review: ReviewState | None = None) -> list[Slot]:
    """The Proposer's half of a step for ``seeds`` (``draw_answers``): search trajectories ending in
    ``<question>``, the rule filter, questions a reviewer flagged filtered out (``review``), then the
    RAG check; ``Slot.valid`` says which questions the Solver gets.

    ``ctx`` needs ``config.ssp``, ``config.rollout``, ``policy.tokenizer``, ``generator`` and
    ``sampling_params(**overrides)``: a RecipeContext, or a namespace around a loaded model (the
    held-out question set of benchmarks/gpu/ssp_eval.py is made by this same code)."""
    slots = new_slots(step, seeds, ctx.config.ssp, rng)
    propose(ctx, tool, slots)
    for s in slots:
        if review is not None:
            review.remember(s.key, s.question)
            if s.filter.ok and review.is_flagged(question=s.question):
                s.filter = FilterResult(False, "flagged")
    rag_check(ctx, judge, slots, rng)
    return slots


def assign_questions(slots: list[Slot], buffer: ReplayBuffer, sec, rng: random.Random) -> None:
    """A slot solves its own validated question, else one replayed from the buffer (if any)."""
    for s in slots:
        if s.valid:
            s.solve = {"key": s.key, "question": s.question, "answer": s.answer, "replayed": False}
    failed = [s for s in slots if not s.valid]
    if sec.batch_fill == "replay":
        for s, entry in zip(failed, buffer.sample(len(failed), rng, sec.replay_max_repeats)):
            s.solve = {**entry, "replayed": True}


def solve(ctx, tool, judge, slots: list[Slot]) -> None:
    sec, tok, G = ctx.config.ssp, ctx.policy.tokenizer, ctx.config.rollout.group_size
    todo = [s for s in slots if s.solve]
    if not todo:
        return
    asks = [chat(tok, SOLVER_SYSTEM, SOLVER_USER.format(question=s.solve["question"])) for s in todo]
    prompts = [p for p in asks for _ in range(G)]
    params = ctx.sampling_params()
    trajs = multi_turn_rollout(ctx.generator, tok, prompts, params, tool, max_turns=sec.max_turns,
                               query_tag="search", final_tag="answer",
                               answer_reserve=ctx.config.rollout.answer_reserve_tokens)
    correct = judged(judge, [(todo[i // G].solve["question"], t.final, todo[i // G].solve["answer"])
                             for i, t in enumerate(trajs)], sec.judge_needs_shared_word)
    for i, s in enumerate(todo):
        s.solver = trajs[i * G:(i + 1) * G]
        s.solver_rewards = [ssp_solver(c, t.n_answer_tags, sec.answer_tag_limit, sec.answer_tag_divisor)
                            for c, t in zip(correct[i * G:(i + 1) * G], s.solver)]


def build_samples(slots: list[Slot], sec, G: int) -> tuple[list[list[Sample]], list[list[Sample]]]:
    """(proposer chunks, solver chunks): advantages per role, split into mini-batches of prompts."""
    by_answer: dict[int, list[Slot]] = {}
    for s in slots:
        by_answer.setdefault(s.group, []).append(s)
    groups = list(by_answer.values())
    rewards = torch.tensor([[s.reward for s in g] for g in groups])  # [B, proposer_samples]
    adv = get_advantage(sec.proposer_advantage)(rewards).tolist()
    proposer = [[Sample.from_trajectory(s.proposer, a, role=PROPOSER) for s, a in zip(g, row)]
                for g, row in zip(groups, adv)]
    solved = [s for s in slots if s.solver]
    solver = []
    if solved:
        r = torch.tensor([s.solver_rewards for s in solved])  # [Q, G]
        adv = get_advantage(sec.solver_advantage)(r).tolist()  # dr_grpo: Eq. 4, r - group mean
        solver = [[Sample.from_trajectory(t, a, role=SOLVER) for t, a in zip(s.solver, row)]
                  for s, row in zip(solved, adv)]
    return mini_batches(proposer, sec.mini_batch_size), mini_batches(solver, sec.mini_batch_size)


def run_ssp(ctx) -> None:
    cfg, sec = ctx.config, ctx.config.ssp
    if ctx.retriever is None:
        raise RuntimeError("SSP needs a search tool: set corpus.path (standalone) or launch it on a corpus (web)")
    tool = SearchTool(ctx.retriever, k=sec.top_k, tokenizer=ctx.policy.tokenizer)
    judge = make_judge(ctx, sec.judge, sec.judge_endpoint, sec.judge_model,  # None for judge=exact
                       api_key_env=key_env(sec.judge_api_key), max_tokens={"equivalent": sec.judge_max_new_tokens})
    answer_list = load_answers(sec.answers_path) if sec.answer_source == "list" else None
    review, buffer = ReviewState(), ReplayBuffer(sec.replay_reset_every)
    review.load_state_dict(ctx.state.get("review", {}))
    buffer.load_state_dict(ctx.state.get("replay", {}))

    for step in ctx.steps():
        review.apply(ctx.take_verdicts())
        buffer.remove(review.flagged_keys)
        review.apply_edits(buffer.entries)  # a replayed question is the one the reviewer corrected
        rng = random.Random(int(ctx.rng.integers(2**62)))
        t0 = time.perf_counter()
        seeds = draw_answers(ctx, cfg.train.prompts_per_step, rng, answer_list)
        slots = propose_questions(ctx, tool, judge, seeds, rng, step, review)
        assign_questions(slots, buffer, sec, rng)
        solve(ctx, tool, judge, slots)
        clusters = control_and_clusters(ctx, slots)
        for s in slots:
            s.reward = ssp_proposer(s.solver_rewards if s.valid else None, invalid=sec.invalid_reward)
            if s.valid and cfg.gate.template_penalty:
                s.reward = template_penalty(s.reward, s.cluster_share)
        gen_seconds = time.perf_counter() - t0

        t1 = time.perf_counter()
        proposer_chunks, solver_chunks = build_samples(slots, sec, cfg.rollout.group_size)
        updated = update_in_mini_batches(ctx, {SOLVER: solver_chunks, PROPOSER: proposer_chunks})
        for role, values in step_metrics(slots, buffer, clusters).items():
            ctx.log(step, role, {**updated.get(role, {}), **values})
        ctx.log(step, PROPOSER, {"gen_seconds": gen_seconds, "update_seconds": time.perf_counter() - t1,
                                 "judge_failure_rate": judge.failure_rate() if judge else 0.0})
        checks = [s.rag for s in slots if s.rag is not None]  # not trained: the update does not see them
        if checks:
            ctx.log(step, RAG, {"checks": float(len(checks)), "truncated_rate": truncated_rate(checks)})
        if judge is not None:
            ctx.log(step, JUDGE, judge.step_metrics())
        ctx.samples(step, records(step, slots))
        buffer.add({"key": s.key, "question": s.question, "answer": s.answer, "step": step} for s in slots if s.valid)
        buffer.end_step(step)
        ctx.state["review"], ctx.state["replay"] = review.state_dict(), buffer.state_dict()


# ---- reporting ----------------------------------------------------------------------------------

def step_metrics(slots: list[Slot], buffer: ReplayBuffer, clusters: list[int] | None = None
                 ) -> dict[str, dict[str, float]]:
    n = len(slots)
    reasons = Counter(s.filter.reason for s in slots if not s.filter.ok)
    checked = [s for s in slots if s.rag_ok is not None]
    solved = [s for s in slots if s.solver]
    rewards = [r for s in solved for r in s.solver_rewards]
    trajs = [t for s in solved for t in s.solver]
    proposer = {
        "reward_mean": sum(s.reward for s in slots) / n,
        "valid_rate": sum(s.valid for s in slots) / n,
        "rule_pass_rate": sum(s.filter.ok for s in slots) / n,
        "rag_pass_rate": sum(bool(s.rag_ok) for s in checked) / len(checked) if checked else 0.0,
        "searches_mean": sum(s.proposer.n_searches for s in slots) / n,
        "searches_refused": searches_refused([s.proposer for s in slots]),
        "replayed_slots": float(sum(bool(s.solve and s.solve["replayed"]) for s in slots)),
        "empty_slots": float(sum(s.solve is None for s in slots)),
        "buffer_size": float(len(buffer)),
        **{f"filtered_{r}_rate": c / n for r, c in reasons.items()},
        "gate_copy_ratio_rate": reasons.get("copy_ratio", 0) / n,
        "gate_copies_example_rate": reasons.get("copies_example", 0) / n,
        "gate_answer_in_question_rate": reasons.get("contains_answer", 0) / n,
        **family_shares([s.answer for s in slots if s.valid], clusters or []),
    }
    groups: dict[int, list[float]] = {}
    for s in slots:
        groups.setdefault(s.group, []).append(s.reward)
    if any(len(g) > 1 for g in groups.values()):  # proposer_samples > 1: a group per answer (REINFORCE n=1 has none)
        proposer["zero_variance_groups"] = zero_variance_groups(list(groups.values()))
    graded = [r for s in solved for r in (s.graded if s.graded is not None else s.solver_rewards)]
    solver = {
        "reward_mean": sum(rewards) / len(rewards) if rewards else 0.0,
        "accuracy": sum(graded) / len(graded) if graded else 0.0,  # the judge's verdicts (also in a control run)
        "questions": float(len(solved)),
        "zero_variance_groups": zero_variance_groups([s.solver_rewards for s in solved]),
        "searches_mean": sum(t.n_searches for t in trajs) / len(trajs) if trajs else 0.0,
        "searches_refused": searches_refused(trajs),
        "answered_rate": sum(t.final is not None for t in trajs) / len(trajs) if trajs else 0.0,
    }
    return {PROPOSER: proposer, SOLVER: solver}


def _ref(p) -> dict:
    return {"document_id": p.document_id, "chunk_id": p.chunk_id, "title": p.title}


def records(step: int, slots: list[Slot]) -> list[dict]:
    """Every Proposer question (filter outcome, RAG verdict) with its trajectory and the Solver's."""
    out = []
    for s in slots:
        own = bool(s.solve) and not s.solve["replayed"]
        out.append({
            "kind": "task", "key": s.key, "role": PROPOSER, "step": step, "question": s.question or "",
            "answer": s.answer, "valid": s.valid, "pass_rate": sum(s.solver_rewards) / len(s.solver_rewards)
            if own and s.solver_rewards else None, "document_id": s.doc_id, "format": None,
            "data": {"required_searches": s.n_searches, "filter_reason": s.filter.reason, "rag_verdict": s.rag_ok,
                     "rag_answer": s.rag_answer, "rag_materials": [_ref(p) for p in s.rag_materials],
                     "rag_noise": [_ref(p) for p in s.rag_noise], "proposer_reward": s.reward, "cluster_share": s.cluster_share,
                     "queries": list(s.proposer.queries),
                     "solved_question": s.solve["key"] if s.solve and s.solve["replayed"] else None}})
        out.append({"kind": "attempt", "key": f"{s.key}:p", "task_key": s.key, "role": PROPOSER, "step": step,
                    "reward": s.reward, **s.proposer.to_attempt(),
                    "data": {"finish_reason": s.proposer.finish_reason, "n_searches": s.proposer.n_searches}})
        if s.rag is not None:
            out.append({"kind": "attempt", "key": f"{s.key}:rag", "task_key": s.key, "role": RAG, "step": step,
                        "text": s.rag.text, "reward": float(bool(s.rag_ok)),
                        "turns": [{"role": "assistant", "text": s.rag.text}],
                        "passages": [p.to_dict() for p in s.rag_materials], "token_ids": s.rag.completion_ids,
                        "loss_mask": [0] * len(s.rag.completion_ids),
                        "data": {"answer": s.rag_answer, "trained": False}})
        for j, (t, r) in enumerate(zip(s.solver, s.solver_rewards)):
            out.append({"kind": "attempt", "key": f"{s.key}:s{j}", "task_key": s.solve["key"], "role": SOLVER,
                        "step": step, "reward": r, **t.to_attempt(),
                        "data": {"answer": t.final, "replayed": s.solve["replayed"], "slot": s.key,
                                 "n_answer_tags": t.n_answer_tags, "finish_reason": t.finish_reason}})
    return out
