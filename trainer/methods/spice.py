"""SPICE: Self-Play In Corpus Environments (spice.txt, Algorithm 1).

One model plays two roles. Per step, for each of ``train.prompts_per_step`` documents drawn
uniformly from the corpus (truncated to ``spice.max_document_tokens``):

1. Challenger: rounds of ``spice.challenger_attempts`` conversations over the document until it
   has ``valid_tasks_per_document`` valid tasks (paper: at least one) or ``max_challenger_attempts``
   attempts (paper 1024), within the step's token budget ``challenger_token_budget``
   (``challenge_until_valid``; the loop is trainer/methods/retry.py). Turn one picks MCQ or
   free-form (+ answer type: Integer, Expression, String) as JSON, turn two thinks step by step, then
   writes the task as JSON (trainer/methods/spice_tasks.py). Unparsable or empty output = an invalid
   task. Attempts per valid task and documents dropped (no valid task, so no Reasoner group) are metrics.
2. ``spice.challenger_group_size`` attempts are kept per document, preserving the
   valid:invalid ratio; every kept valid task gets ``rollout.group_size`` Reasoner answers
   (system prompt "You are a helpful assistant.", question only, ``\\boxed{}``), checked by letter
   (MCQ), math-verify (integer, float, expression) or normalized match (string, boolean).
3. Rewards: Reasoner 1/0; Challenger exp(-(p(1-p) - 0.25)^2 / 0.02) for a valid task with
   pass rate p, a penalty for an invalid one (``challenger_reward`` selects an ablation).
   Dr.GRPO advantages in per-role groups: the kept Challenger attempts of one document; the
   answers to one valid task per document. No KL. Both roles' samples, shuffled, in mini-batches
   of ``spice.mini_batch_size`` (paper: 128 trajectories per gradient update), one optimizer step each.

A task a reviewer flags (sink verdict) counts as invalid and is never a Reasoner group from
then on (matched by key and by question text; the flagged set is checkpointed).

Run it::

    python -m trainer run examples/spice_cpu.yaml --out var/runs/spice-cpu

Departures from the paper:
- every task goes through the task gate (trainer/methods/gate.py; ``gate.*``, none of it the paper's): besides the
  per-task rules below, a task copying more than ``gate.copy_ratio`` of its document's character 6-grams is invalid;
  a reader that sees the document answers each kept valid task ``gate.consensus_samples`` (5) times and the task is
  invalid unless a strict majority agrees with the Challenger's answer; after the Reasoner's answers a guess probe
  (the Reasoner answering within ``gate.guess_max_new_tokens`` tokens) that passes the task at least as often makes
  it invalid ("task is guessable"); the pass rate is chance-corrected before the reward ((p - c) / (1 - c), c = 1/4 for
  an MCQ); a valid task's reward loses its template cluster's share of the step's valid tasks (R-Zero's
  max(0, r - |C|/B)); an invalid task costs ``gate.format_penalty`` (-1) when nothing parsed and ``gate.rule_penalty``
  (-0.5) when a rule refused it (paper: -0.1 for any, ``spice.invalid_penalty`` restores it). Why: without a gate
  every Qwen run collapsed into a guessable family; with it, a 1.5B run's held-out cloze rose +6.0 [+2.3, +9.7] over a
  random-reward control while its valid-task rate climbed from 5% to 59% and no family took over
  (benchmarks/RESULTS.md, "Self-play through the task gate"). A second seed did not reproduce it: its Challenger
  drifted within 19 steps to MCQs whose right option was always A (61 of its 63 held-out MCQs), which its Reasoner
  learned to answer by letter. So the gate puts an MCQ's options in a random order before any solver reads it, the
  gold letter moved with its option (``gate.shuffle_options``; the Challenger's own tokens stay as written; one
  question written twice reads the same both times; the cross-play evaluation shuffles too), an MCQ whose options
  cannot be told apart is invalid (``gate_options_rate``), and ``mcq_letter_share_max`` logs the largest share of one
  letter among the valid MCQs as written. A third seed, shuffled, did not gain either (three seeds pooled: cloze +1.3
  [-1.2, +3.8] over the controls, GSM8K -3.2 [-4.8, -1.6]); its Challenger drifted to numbers to recall ("How many
  people live in Timbuktu?": 52 of its 64 held-out tasks). ``gate.recall`` (ours, off by default, not yet run on a
  GPU) refuses a numeric task whose question gives no number and tells the Challenger so in its task prompt, after
  the paper's free-form prompt ("Include all necessary context and definitions"; avoid "direct lookups or
  single-fact answers");
- ``train.control: random-reward`` (ours) replaces each Reasoner reward by a coin flip; the Challenger's reward is
  computed from the flips as usual, the gate from the grader's verdicts;
- the retries run in rounds of ``challenger_attempts`` (the paper gives no round size) and stop
  early when the step's token budget is spent (a safety bound; by default one round's worst case
  on a GPU, so retries spend what early stops saved: raise ``challenger_token_budget`` for the
  paper's full 1024 attempts; on a CPU no retry by default, since decoding there is latency-bound
  and a retry round of one document costs as long as the first round: the CPU example's step took
  585 s with three rounds against 103 s with one); the sink gets every kept, valid or first-round
  attempt, not every retry;
- the Challenger's two prompts are one two-turn conversation (the document is read once; both
  turns are trained, the second user turn is masked out of the loss); prompts are reworded and
  shorter (same structure and JSON fields, fewer free-text fields), each assistant turn opens with
  the start of its JSON;
- the task prompt may end with a worked example for another document (``spice.worked_example``,
  ours, off by default and on in the SmolLM2 configs: SmolLM2-135M writes no valid task without
  it, while Qwen2.5-Coder-0.5B wrote 8/16 valid tasks with it and none grounded in its document,
  5/16 without and 2-3 of them grounded; benchmarks/RESULTS.md, "Worked example"); a task
  restating it, reworded or not, is invalid either way (``spice_tasks.copies_example``);
- validity beyond "formatted correctly and parsable" (ours; the paper's Challenger prompt asks for
  self-contained questions that "cannot be answered by simple text search", but its validity test
  is parsing only): a free-form task whose question states its gold answer (normalized words, or
  the same number; booleans and MCQ letters exempt) is invalid ("answer in question", the check
  SSP's rule filter shares, ``parts.answer_in_question``), and so is a question with fewer than 3
  words holding a letter ("question has no words"). Qwen2.5-Coder-0.5B's Challenger collapsed
  within ~30 steps to digit strings answered by themselves, which parsed as valid; its Reasoner
  learned to copy them and held-out GSM8K fell from 28.0% to 14.2%. A question that refers to the
  document ("the given text", "according to the passage", "as mentioned") is invalid too ("question
  refers to the document"): the paper's prompt makes this a CRITICAL rule, we also check it; the
  1.5B's Challenger collapsed within 15 steps to "How many paragraphs are there in the given text?"
  -> 1. With those three rules in force, the next 1.5B run's Challenger collapsed within 33 steps to
  "How many correct answers? -> 1" (96/96 of its held-out tasks, Reasoner 99.7%): a question sharing
  no content word (name, term, number) with its document is invalid ("question is not about the
  document", ``spice.require_grounding``, on by default; 4 of the base Challenger's 96 tasks fail it).
  A question the step's Challenger wrote for two or more different documents is invalid as well
  ("question repeated across documents", ``gate.mark_repeated``; training only, the
  cross-play evaluation keeps the per-task rules): every collapse so far was one template for all
  documents. With all of these in force, the next 1.5B run's Challenger collapsed within 37 steps to integer
  questions grounded in a name of their document and worded differently for each ("How many continents does Niger
  lie on? -> 1", "How many sides did the Polish-Lithuanian Commonwealth have? -> 2"): answers 1 and 2 on 94 of its
  96 held-out documents (the base Challenger's most frequent answer: 1, on 4), which its Reasoner learned to guess
  (63.5% on them). So a free-form answer the step's Challenger gives for more than ``spice.max_answer_share`` (0.25)
  of the step's documents, and for 3 or more of them, is invalid too ("answer repeated across documents",
  ``gate.mark_repeated_answers``; training only; numbers compared by value as the graders do, MCQ letters
  exempt; a document counts once, split over the answers of its valid free-form tasks, since counting it whole for
  any attempt's answer would flag 60% of 16-document steps drawn from the 1.5B runs' first steps). Taking each
  Challenger's held-out set as one step, it marks 94/96 of that collapse, 96/96 of the step-33 one, 43/48 of the first
  1.5B run's step-15 tasks, none of the 0.5B's digit strings (each its own; the rules above refuse them), none of
  the five base Challengers' 347 tasks and none of the GSM8K-document run's 64 step-10 tasks
  (benchmarks/spice_answer_rule.py). Metrics ``invalid_answer_in_question_rate``, ``invalid_no_words_rate``,
  ``invalid_refers_to_document_rate``, ``invalid_not_grounded_rate``, ``invalid_repeated_rate``,
  ``invalid_repeated_answer_rate`` (and ``invalid_copies_example_rate``);
- token budgets (the paper's text gives none): ``rollout.max_new_tokens`` 8192 for the task turn
  and each Reasoner answer (``task_max_new_tokens``, ``reasoner_max_new_tokens``), 256 for the
  format choice (``format_max_new_tokens``); 8192 is also Dr.GRPO's constant normaliser (seq_sum);
- the mini-batches' PPO reference is the rollout's log-probs (several optimizer steps on one rollout);
  with several ranks each takes mini_batch_size / ranks trajectories a step.
"""
from __future__ import annotations

import random
import time
from collections import Counter

import torch

from trainer.algos import get_advantage
from trainer.methods.parts import average_updates, zero_variance_groups
from trainer.methods.retry import RetryLimits, draw_until
from trainer.methods.review import ReviewState
from trainer import distributed as dist
from trainer.methods.gate import (GUESSABLE, NO_CONSENSUS, chance_corrected, chance_level, cluster_shares, consensus,
                                  gate_metrics, guessable, largest_share, rule_of, mark_repeated, mark_repeated_answers,
                                  template_clusters, template_penalty)
from trainer.methods.spice_tasks import (
    TASK_RULES,
    Attempt,
    answer,
    challenge,
    draw_numbers,
    guess,
    keep_preserving_ratio,
    read,
    role_budget,
)
from trainer.rewards import control_rewards, spice_reward_fn
from trainer.update import Sample
from trainer.verify import extract_boxed

CHALLENGER, REASONER = "challenger", "reasoner"


# ---- pure wiring: grading and rewards -----------------------------------------------------------

def challenger_reward(attempt: Attempt, reward_fn, sec, gate) -> float:
    """The paper's r_C of a valid task, reward_fn(pass rate), the rate chance-corrected (``gate.chance_correct``:
    an MCQ guessed blind passes 1/4) and less its template cluster's share (``gate.template_penalty``); an invalid
    task's penalty: ``spice.invalid_penalty`` when set (the paper's -0.1 for any), else ``gate.format_penalty`` for
    an output that did not parse and ``gate.rule_penalty`` for a task a rule refused."""
    if not (attempt.valid and attempt.correct):
        if sec.invalid_penalty is not None:
            return sec.invalid_penalty
        return gate.rule_penalty if attempt.task is not None else gate.format_penalty
    p = sum(attempt.correct) / len(attempt.correct)
    if gate.chance_correct:
        p = chance_corrected(p, chance_level(attempt.task.format, attempt.task.answer_type))
    reward = reward_fn(p)
    return template_penalty(reward, attempt.cluster_share) if gate.template_penalty else reward


def gate_with_model(ctx, attempts: list[Attempt], docs) -> None:
    """The task gate's model rules on the kept valid tasks, before the Reasoner answers: the consensus label (a
    reader with the document must agree with the gold)."""
    if ctx.config.gate.consensus_samples:
        read(ctx, attempts, docs)
        for a in attempts:
            if a.agrees is not None and not consensus(a.agrees):
                a.reason = f"task: {NO_CONSENSUS} ({sum(a.agrees)} of {len(a.agrees)} of its answers agree)"


def gate_guessable(ctx, attempts: list[Attempt]) -> None:
    """The guess probe, after the Reasoner's answers: a task passed as often without room to reason is invalid."""
    if not ctx.config.gate.guess_probe:
        return
    guess(ctx, attempts)
    for a in attempts:
        chance = chance_level(a.task.format, a.task.answer_type)
        rate = sum(a.guessed) / len(a.guessed)
        if guessable(rate, a.pass_rate, chance):
            a.reason = f"task: {GUESSABLE} (guessed {rate:.0%} without reasoning, {a.pass_rate:.0%} with)"


def mark_clusters(attempts: list[Attempt], similarity: float) -> list[int]:
    """Each valid task's template cluster share among the step's valid tasks (``gate.template_clusters``)."""
    valid = [a for a in attempts if a.valid]
    ids = template_clusters([a.task.question for a in valid], similarity)
    for a, share in zip(valid, cluster_shares(ids)):
        a.cluster_share = share
    return ids


def control_flips(ctx, attempts: list[Attempt]) -> None:
    """A random-reward control (``train.control``, ``rewards.control_rewards``): the Reasoner's reward is a coin flip
    per answer; the grader's verdicts stay in ``graded`` (metrics, the guess probe)."""
    for a in attempts:
        a.correct = [bool(x) for x in control_rewards(ctx, a.correct)]


def update_in_mini_batches(ctx, samples: list[Sample], size: int, rng: random.Random) -> dict:
    """One optimizer step per mini-batch of ``size`` trajectories (both roles mixed, shuffled), the paper's 128; one
    step for all when ``size`` is 0 or covers them. Several ranks: each takes size / ranks a step, and all make as
    many steps as the rank with the most samples needs, but no more than the rank with the fewest samples has.
    Metrics averaged per role over the steps, plus ``optimizer_steps``."""
    world = dist.world_size() if dist.active() else 1
    per_rank = max(1, size // world) if size else len(samples) or 1
    wanted = -(-len(samples) // per_rank) if samples else 1
    n = int(dist.all_reduce([wanted], "max")[0])
    n = max(1, min(n, int(dist.all_reduce([len(samples)], "min")[0])))
    if n == 1:
        return average_updates([ctx.update(samples)])
    order = list(samples)
    rng.shuffle(order)
    return average_updates([ctx.update(order[i::n]) for i in range(n)])


# ---- one step -----------------------------------------------------------------------------------

def sample_documents(ctx, n: int, rng: random.Random):
    if ctx.documents is None:
        raise RuntimeError("SPICE needs a corpus: set corpus.path (standalone) or launch it on a corpus (web)")
    docs = ctx.documents.sample(n, rng)
    if not docs:
        raise RuntimeError("the corpus has no documents; ingest some before running SPICE")
    return docs


def challenge_until_valid(ctx, docs, step: int, draws: list[int], review: ReviewState):
    """Challenger rounds of ``challenger_attempts`` per document until it has
    ``valid_tasks_per_document`` valid tasks, ``max_challenger_attempts`` attempts, or the step's
    token budget is spent (trainer/methods/retry.py). A flagged question counts as invalid.
    Returns (attempts per document, RetryReport)."""
    sec = ctx.config.spice
    by_doc: list[list[Attempt]] = [[] for _ in docs]
    rounds = sec.max_challenger_attempts // sec.challenger_attempts

    def draw(items: list[int], round_: int) -> int:
        new = challenge(ctx, [docs[d] for d in items], step, [draws[d] * rounds + round_ for d in items])
        for a in new:
            a.group, a.round = items[a.group], round_
            mark_flagged(a, review)
            review.remember(a.key, a.task.question if a.task else None)
            by_doc[a.group].append(a)
        step_attempts = [a for attempts in by_doc for a in attempts]
        mark_repeated(step_attempts)
        mark_repeated_answers(step_attempts, sec.max_answer_share)
        return sum(sum(a.loss_mask) for a in new)  # tokens the Challenger generated

    worst = sec.format_max_new_tokens + role_budget(ctx, sec.task_max_new_tokens)  # both Challenger turns
    budget = token_budget(sec, worst, ctx.policy.device.type) * len(docs)
    limits = RetryLimits(sec.challenger_attempts, sec.max_challenger_attempts, budget, worst)
    report = draw_until(len(docs), draw, lambda d: sum(a.valid for a in by_doc[d]) >= sec.valid_tasks_per_document,
                        limits)
    return by_doc, report


def token_budget(sec, worst: int, device_type: str) -> int:
    """Challenger tokens per document a step may spend on all its rounds: ``challenger_token_budget``,
    or unset, one round's worst case (``worst`` tokens an attempt) off the CPU and 0 on it (decoding
    there is latency-bound: a retry round of one document costs as long as the first round)."""
    if sec.challenger_token_budget is not None:
        return sec.challenger_token_budget
    return 0 if device_type == "cpu" else sec.challenger_attempts * worst


def mark_flagged(attempt: Attempt, review: ReviewState) -> None:
    """A valid task whose key or question a reviewer flagged becomes invalid."""
    if attempt.valid and review.is_flagged(attempt.key, attempt.task.question):
        attempt.reason = "flagged by a reviewer"


def select(attempts_by_doc: list[list[Attempt]], sec, review: ReviewState, rng: random.Random) -> None:
    """Keep G attempts per document (ratio preserved); flagged questions become invalid."""
    for attempts in attempts_by_doc:
        for a in attempts:
            mark_flagged(a, review)
        for i in keep_preserving_ratio([a.valid for a in attempts], sec.challenger_group_size, rng):
            attempts[i].kept = True


def build_samples(attempts_by_doc, sec, advantage, rng: random.Random) -> list[Sample]:
    """Challenger groups (kept attempts of a document) and Reasoner groups (answers to
    ``reasoner_tasks_per_document`` random valid tasks of a document), Dr.GRPO within each."""
    samples = []
    for attempts in attempts_by_doc:
        kept = [a for a in attempts if a.kept]
        adv = advantage(torch.tensor([[a.reward for a in kept]])).flatten().tolist()  # [G_C]
        samples += [Sample(prompt_ids=a.prompt_ids, completion_ids=a.completion_ids, loss_mask=a.loss_mask,
                           old_logprobs=a.logprobs, advantage=float(x), role=CHALLENGER, truncated=a.truncated)
                    for a, x in zip(kept, adv)]
        graded = [a for a in kept if a.valid and a.correct]
        for a in rng.sample(graded, min(sec.reasoner_tasks_per_document, len(graded))):
            a.trained_reasoner = True
            adv = advantage(torch.tensor([[float(c) for c in a.correct]])).flatten().tolist()  # [G]
            samples += [Sample(prompt_ids=c.prompt_ids, completion_ids=c.completion_ids,
                               loss_mask=[1] * len(c.completion_ids), old_logprobs=c.logprobs,
                               advantage=float(x), role=REASONER, temperature=c.temperature,
                               truncated=c.finish_reason == "length")
                        for c, x in zip(a.answers, adv)]
    return samples


def run_spice(ctx) -> None:
    sec, gate = ctx.config.spice, ctx.config.gate
    reward_fn = spice_reward_fn(sec.challenger_reward, tau=sec.gaussian_tau)
    advantage = get_advantage(sec.advantage)
    review = ReviewState()
    review.load_state_dict(ctx.state.get("review", {}))

    for step in ctx.steps():
        review.apply(ctx.take_verdicts())
        rng = random.Random(int(ctx.rng.integers(2**62)))
        t0 = time.perf_counter()
        drawn = sample_documents(ctx, ctx.config.train.prompts_per_step, rng)
        mine = ctx.shard(range(len(drawn)))  # several GPUs: each rank plays its share of the documents
        docs = [drawn[i] for i in mine]
        draws = draw_numbers(drawn)
        by_doc, retries = challenge_until_valid(ctx, docs, step, [draws[i] for i in mine], review)
        attempts = [a for row in by_doc for a in row]
        select(by_doc, sec, review, rng)
        phases = {"challenger_seconds": time.perf_counter() - t0}  # where a step's generation goes (issue 33)
        t = time.perf_counter()
        gate_with_model(ctx, [a for a in attempts if a.kept and a.valid], docs)
        phases["consensus_seconds"], t = time.perf_counter() - t, time.perf_counter()
        answer(ctx, [a for a in attempts if a.kept and a.valid])
        phases["reasoner_seconds"], t = time.perf_counter() - t, time.perf_counter()
        gate_guessable(ctx, [a for a in attempts if a.kept and a.valid])
        phases["guess_probe_seconds"] = time.perf_counter() - t
        control_flips(ctx, [a for a in attempts if a.kept and a.valid])
        clusters = mark_clusters(attempts, gate.template_similarity)
        for a in attempts:  # an attempt left out of its group is not trained; an invalid one still shows its penalty
            a.reward = challenger_reward(a, reward_fn, sec, gate) if a.kept or not a.valid else 0.0
        samples = build_samples(by_doc, sec, advantage, rng)
        gen_seconds = time.perf_counter() - t0

        t1 = time.perf_counter()
        updated = update_in_mini_batches(ctx, samples, sec.mini_batch_size, rng)
        for role, values in step_metrics(attempts, clusters).items():
            ctx.log(step, role, {**updated.get(role, {}), **values})
        dropped = sum(not any(a.valid for a in row) for row in by_doc)  # no valid task: no Reasoner group
        ctx.log(step, CHALLENGER, {"gen_seconds": gen_seconds, "update_seconds": time.perf_counter() - t1, **phases,
                                   "documents_dropped": dropped, **retries.metrics(sum(a.valid for a in attempts))})
        ctx.samples(step, records(step, [a for a in attempts if a.kept or a.valid or a.round == 0]))  # not every retry
        ctx.state["review"] = review.state_dict()


# ---- reporting ----------------------------------------------------------------------------------

def step_metrics(attempts: list[Attempt], clusters: list[int] | None = None) -> dict[str, dict[str, float]]:
    kept = [a for a in attempts if a.kept]
    graded = [a for a in kept if a.correct]
    probed = [a for a in graded if a.guessed]
    read_ = [a for a in attempts if a.agrees]
    answers = [c for a in graded for c in a.answers]
    reasons = Counter(a.reason.split(":")[0] for a in attempts if a.reason)
    challenger = {
        "valid_rate": sum(a.valid for a in attempts) / len(attempts),
        "kept_valid_rate": sum(a.valid for a in kept) / max(len(kept), 1),
        "reward_mean": sum(a.reward for a in kept) / max(len(kept), 1),
        **({"pass_rate_mean": sum(a.pass_rate for a in graded) / len(graded)} if graded else {}),
        "mcq_share": sum(a.choice is not None and a.choice.format == "mcq" for a in attempts) / len(attempts),
        # the Challenger's MCQs as written: the largest share of one gold letter among the valid ones (before the
        # gate's option shuffle; 0.25 when the right option's position is spread evenly)
        "mcq_letter_share_max": largest_share([a.written_letter for a in attempts if a.valid and a.written_letter]),
        "response_length": sum(sum(a.loss_mask) for a in kept) / max(len(kept), 1),
        **{f"invalid_{r.split()[0]}_rate": n / len(attempts) for r, n in reasons.items()},
        **{f"invalid_{name}_rate": sum(a.reason.startswith(f"task: {text}") for a in attempts) / len(attempts)
           for name, text in TASK_RULES.items()},  # the task rules, each on its own (also in invalid_task_rate)
        # the task gate: each rule's share, the largest answer share and template cluster of the valid tasks
        **gate_metrics([a.reason for a in attempts],
                       [a.task.answer for a in attempts if a.valid and a.task.format == "free_form"], clusters or []),
        "guess_pass_rate": (sum(sum(a.guessed) for a in probed) / sum(len(a.guessed) for a in probed)
                            if probed else 0.0),
        "consensus_rate": sum(consensus(a.agrees) for a in read_) / len(read_) if read_ else 0.0,
        "truncated_rate": sum(a.truncated for a in attempts) / len(attempts),
        "zero_variance_groups": zero_variance_groups([[a.reward for a in kept if a.group == g]
                                                      for g in {a.group for a in kept}]),
    }
    if not graded:  # no valid task reached the Reasoner: nothing was measured, so no accuracy / boxed / length
        return {CHALLENGER: challenger, REASONER: {"tasks": 0.0}}  # (a 0 would draw as a measured point)
    trained = [c for a in graded if a.trained_reasoner for c in a.answers]
    reasoner = {
        "accuracy": sum(sum(a.graded if a.graded is not None else a.correct) for a in graded) / max(len(answers), 1),
        "tasks": float(len(graded)),
        "boxed_rate": sum(extract_boxed(c.text) is not None for c in answers) / max(len(answers), 1),
        "response_length": sum(len(c.completion_ids) for c in trained) / max(len(trained), 1),
        "zero_variance_groups": zero_variance_groups([[float(x) for x in a.correct] for a in graded
                                                      if a.trained_reasoner]),
    }
    return {CHALLENGER: challenger, REASONER: reasoner}


def records(step: int, attempts: list[Attempt]) -> list[dict]:
    """Every task (valid or not) with the Challenger conversation and the Reasoner's answers."""
    out = []
    for a in attempts:
        t = a.task
        out.append({
            "kind": "task", "key": a.key, "role": CHALLENGER, "step": step,
            "question": t.question if t else "", "answer": t.answer if t else "", "valid": a.valid,
            "pass_rate": a.pass_rate, "document_id": a.doc_id, "format": a.choice.format if a.choice else None,
            "data": {"answer_type": t.answer_type if t else (a.choice.answer_type if a.choice else None),
                     "invalid_reason": a.reason, "challenger_reward": a.reward, "kept": a.kept,
                     "reasoner_group": a.trained_reasoner, "document_title": a.doc_title, "attempt": a.index,
                     "round": a.round, "gate_rule": rule_of(a.reason), "cluster_share": a.cluster_share,
                     "guess_rate": sum(a.guessed) / len(a.guessed) if a.guessed else None,
                     "reader_agrees": sum(a.agrees) / len(a.agrees) if a.agrees else None,
                     # an MCQ's letter as the Challenger wrote it (its turn text); "answer" is the shuffled one
                     "written_answer": a.written_letter}})
        out.append({"kind": "attempt", "key": f"{a.key}:c", "task_key": a.key, "role": CHALLENGER, "step": step,
                    "text": "\n\n".join(turn["text"] for turn in a.turns), "reward": a.reward, "turns": a.turns,
                    "passages": [], "token_ids": a.completion_ids, "loss_mask": a.loss_mask,
                    "data": {"kept": a.kept}})
        for j, c in enumerate(a.answers):
            out.append({"kind": "attempt", "key": f"{a.key}:r{j}", "task_key": a.key, "role": REASONER,
                        "step": step, "text": c.text, "reward": float(a.correct[j]),
                        "turns": [{"role": "assistant", "text": c.text}], "passages": [],
                        "token_ids": c.completion_ids, "loss_mask": [1] * len(c.completion_ids),
                        "data": {"boxed": extract_boxed(c.text), "trained": a.trained_reasoner,
                                 "graded": bool(a.graded[j]) if a.graded is not None else None,
                                 "finish_reason": c.finish_reason}})
    return out
