"""pi-Play: an Examiner builds multi-hop questions; a Student learns with GRPO and self-distillation
from a teacher that sees how each question was built.

Per iteration (``piplay.iterations``, paper 3):

1. Examiner stage (``examiner_steps``): for each of ``train.prompts_per_step`` corpus passages
   draw a hop count 1-4 (4:3:2:1, stratified per batch), let the policy in the examiner role
   search n-1 times and write ``<question>`` + ``<answer>``. Each valid question gets n=5
   Student attempts (with search); k correct (exact match) gives r_d = (n-k)/(n-1) for 0<k<n,
   else 0; reward R = r_d + 0.5 r_fmt. Advantages are normalised within each hop group (one
   question per prompt), then one update.
2. Student stage (``student_steps``): the examiner writes fresh questions, batch after batch of
   ``train.prompts_per_step`` passages, until the Student has ``train.prompts_per_step`` (paper 256)
   valid questions or ``student_draw_rounds`` batches were drawn (``passages_drawn`` and
   ``questions`` are metrics: the batch no longer shrinks silently with the examiner's invalid
   rate); its whole trajectory
   (passage, reasoning, searches, results, question, answer) is the question construction path
   (QCP). The Student answers each question G=5 times; loss = GRPO (clip 0.2) on exact match
   plus lambda x L_SD, where L_SD is the top-K (50) + tail divergence between the Student and a
   teacher on the Student's own tokens (tool output masked). The teacher is an EMA (0.05) of the
   Student that reads the question PLUS the QCP; it only scores the Student's tokens with one
   forward pass (``TeacherEMA``; with LoRA an EMA of the adapted weights W0 + s B A, not of the
   factors B and A one by one). lambda decays per iteration (0.03, 0.003, 0.002). The teacher moves
   after every Student step.

Policies (``model.policies``): separate by default, as in the paper: the examiner and the student
each train their own LoRA adapter, with its own optimizer state and checkpoint entry, over one
frozen base, and each rollout runs its role's adapter; the teacher is an EMA of the weights the
student's adapter makes (W0 + s B A per adapted layer). ``model.policies: shared`` trains one set of weights for both roles (full fine-tune
possible; the teacher is then an EMA of all trainable weights).

Schedule: ``piplay.iterations`` (paper 3) of ``examiner_steps`` then ``student_steps`` (paper 50 +
50); train.steps defaults to iterations x (examiner_steps + student_steps) = 300, and role
``schedule`` reports the iteration and stage of every step. Token budgets:
``examiner_max_new_tokens`` and ``student_max_new_tokens`` (default ``rollout.max_new_tokens``,
4096). Run it::

    python -m trainer run examples/piplay_cpu.yaml --out var/runs/piplay

Departures from the paper (each a config field where it is a choice):
- separate policies are LoRA adapters (rank 64, alpha 32 by default) over one frozen base; the paper
  trains two full models at lr 1e-6. train.lr stays the paper's 1e-6 and the adapters train at
  ``model.lora.lr: auto`` = 1e-6 x sqrt(3) x hidden_size / alpha: measured on SmolLM2-135M
  (benchmarks/lora_lr.py), one Adam step of an adapter at 1e-6 moved the objective 0.034 as far as a full
  fine-tune step, at auto 1.07 (KL after three steps 0.001 and 1.14 of the full fine-tune's);
  ``model.lora.lr: train`` keeps 1e-6;
- the Student stage draws its questions on the fly each step from the current examiner instead
  of generating the whole data set up front (same distribution, no stale pool);
- the examiner's format reward is ours (think / searches / tags, see ``examiner_format``): the
  paper points to Dr.Zero's without restating it; an unparsable question gets r_d = 0;
- an invalid question's reward is the task gate's (``piplay.invalid_reward: gate``): gate.format_penalty (-1) when
  no question and answer parse, gate.rule_penalty (-0.5) when a gate rule refused it. The paper's (``paper``) is
  0.5 r_fmt with r_d = 0, as much as a valid question the Student never solves: on Qwen2.5-Coder-1.5B
  (benchmarks/RESULTS.md, 2026-11-28) the Examiner's valid questions fell from 72% to 23-41% in 7 steps under it,
  and its replies cut off by the budget rose from 6% to 38%, while its random-reward control stayed 56-77% valid;
- searching rollouts keep ``rollout.answer_reserve_tokens`` (default a quarter of the budget) for the
  Examiner's question and the Student's answer:
  search results are cut to keep it, and a search with no room left is refused with a note; the result of
  a search in the turn before the last says it was the last search (``multi_turn.LAST_TURN``) (ours; the
  paper states none);
- the divergence direction is ``piplay.divergence`` (reverse KL by default, ours; the formulas
  were lost from the paper's text);
- budgets bound the response, tool output included (the paper bounds the whole sequence: 4096
  tokens examiner, 8192 student); learning-rate warmup is 2 steps (the paper: a ratio of 0.03).
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import torch

from trainer.algos import get_advantage, group_normalized
from trainer.methods.parts import (schedule, schedule_metrics, searches_refused, stratified_draw, truncated_rate,
                                   zero_variance_groups)
from trainer.methods.piplay_parts import (
    build_qcp,
    examiner_format,
    examiner_prompt,
    lambda_for_iteration,
    make_distill_loss,
    make_teacher,
    parse_question_answer,
    student_prompt,
    teacher_prompt,
)
from trainer.prompts import chat
from trainer.methods.gate import (GateTask, check_task, cluster_shares, gate_metrics, rule_of, template_clusters,
                                  template_penalty)
from trainer.rewards import control_rewards, piplay_examiner_reward
from trainer.rollout.multi_turn import multi_turn_rollout
from trainer.tools.search import SearchTool
from trainer.tools.corpus import truncate_to_tokens
from trainer.update import Sample
from trainer.verify import exact_match

EXAMINER, STUDENT = "examiner", "student"


@dataclass
class Question:
    key: str
    document_id: str
    passage: str  # the (truncated) source passage the examiner saw
    hops: int
    trajectory: object  # the examiner's Trajectory (its turns are the QCP)
    question: str | None
    answer: str | None
    r_fmt: float
    attempts: list = field(default_factory=list)  # Student trajectories
    correct: list = field(default_factory=list)  # bool per attempt
    reason: str = ""  # the task gate's refusal ("task: <rule> ..."), "" when it passed
    cluster: int = -1  # its template cluster among the batch's valid questions (task gate)
    cluster_share: float = 0.0  # that cluster's share of the batch's valid questions

    @property
    def valid(self) -> bool:
        return bool(self.question and self.answer) and not self.reason

    @property
    def qcp(self) -> str:
        return build_qcp(self.passage, self.trajectory.turns, self.question or "", self.answer or "")


def gate_questions(questions: list[Question], gate) -> None:
    """The task gate's rules that need no model (trainer/methods/gate.py): a question stating its answer, with too
    few words, pointing at "the passage", or copying its passage beyond ``gate.copy_ratio`` is invalid (not
    grounding: a multi-hop question may name only what the searches found); then each valid question's template
    cluster share, which the Examiner's reward loses (``gate.template_penalty``)."""
    for q in questions:
        if q.question and q.answer:
            why = check_task(GateTask(q.question, q.answer, q.passage), max_copy_ratio=gate.copy_ratio,
                             require_grounding=False)
            q.reason = f"task: {why}" if why else ""
    valid = [q for q in questions if q.valid]
    ids = template_clusters([q.question for q in valid], gate.template_similarity)
    for q, c, share in zip(valid, ids, cluster_shares(ids)):
        q.cluster, q.cluster_share = c, share


def stage_of(step: int, sec) -> tuple[int, str]:
    """(0-based iteration, "examiner" | "student") of a 1-based step."""
    iteration, stage, _ = schedule(step, sec.examiner_steps, sec.student_steps)
    return iteration, (EXAMINER, STUDENT)[stage]


def examiner_rewards(questions: list[Question], n: int, format_weight: float,
                     template_share: bool = False, penalties: tuple[float, float] | None = None) -> list[float]:
    """R = r_d + 0.5 r_fmt for a valid question. An invalid one has no attempts: with ``penalties`` (format, rule)
    =  (gate.format_penalty, gate.rule_penalty), the task gate's (``piplay.invalid_reward: gate``), R is the first
    when no question and answer parsed (a reply cut off by its budget, broken tags) and the second when a gate rule
    refused it; without (``paper``), r_d = 0 and R = 0.5 r_fmt, as much as a valid question no Student attempt
    solved. ``template_share``: a valid question's R loses its template cluster's share (the task gate; R-Zero's
    max(0, R - |C|/B))."""
    if template_share:
        return [template_penalty(r, q.cluster_share) if q.valid else r
                for r, q in zip(examiner_rewards(questions, n, format_weight, penalties=penalties), questions)]

    def invalid(q: Question) -> float:
        if penalties is None:
            return format_weight * q.r_fmt
        return penalties[1] if q.question and q.answer else penalties[0]

    return [piplay_examiner_reward(sum(q.correct), n, q.r_fmt, format_weight) if q.valid else invalid(q)
            for q in questions]


def hop_mix(questions: list[Question], max_hops: int) -> dict[str, float]:
    """Share of the VALID questions at each hop count (``valid_hops_1`` ...): what the Student is taught."""
    valid = [q for q in questions if q.valid]
    return {f"valid_hops_{h}": sum(q.hops == h for q in valid) / len(valid) if valid else 0.0
            for h in range(1, max_hops + 1)}


def examiner_advantages(rewards: list[float], hops: list[int]) -> list[float]:
    """Hop-group normalisation: (R - mean_hop) / (std_hop + eps), one question per prompt."""
    return group_normalized(rewards, hops).tolist()


class PiPlay:
    """The recipe's state between steps: tool, teacher, and the helpers each stage uses."""

    def __init__(self, ctx):
        if ctx.retriever is None:
            raise ValueError("pi-Play needs a search tool: set corpus.path (JSONL with title and text) "
                             "or launch it on a corpus")
        if ctx.documents is None:
            raise ValueError("pi-Play needs corpus documents for the examiner: set corpus.path")
        self.ctx, self.cfg, self.sec = ctx, ctx.config, ctx.config.piplay
        self.tok = ctx.policy.tokenizer
        self.tool = SearchTool(ctx.retriever, k=self.sec.top_k, max_tokens=self.sec.max_tool_tokens,
                               tokenizer=self.tok)
        self.teacher = make_teacher(ctx.policy, STUDENT, rate=1.0 - self.sec.teacher_ema)
        if "teacher" in ctx.state:
            self.teacher.load_state_dict(ctx.state["teacher"])
        self.grpo = get_advantage("grpo")

    def rng(self) -> random.Random:
        return random.Random(int(self.ctx.rng.integers(2**31)))

    def rollout(self, role: str, prompts: list[str], max_turns: int, budget: int | None = None):
        """Multi-turn search rollouts by ``role``'s policy (its own adapter with separate policies);
        ``budget``: the role's token budget (None = rollout.max_new_tokens)."""
        ids = [chat(self.tok, None, p) for p in prompts]
        params = self.ctx.sampling_params(**({} if budget is None else {"max_new_tokens": budget}))
        with self.ctx.policy.acting(role):
            return multi_turn_rollout(self.ctx.generator, self.tok, ids, params, self.tool, max_turns=max_turns,
                                      answer_reserve=self.ctx.config.rollout.answer_reserve_tokens)

    def examine(self, step: int, tag: str = "e") -> list[Question]:
        """One examiner question per passage, hops stratified 4:3:2:1 over the batch."""
        n = self.cfg.train.prompts_per_step
        rng = self.rng()
        docs = self.ctx.documents.sample(n, rng)
        hops = stratified_draw(len(docs), self.sec.hop_weights, rng)
        texts = [truncate_to_tokens(f"(Title: {d.title})\n{d.text}", self.tok, self.sec.max_document_tokens)
                 for d in docs]
        trajs = self.rollout(EXAMINER, [examiner_prompt(t, h) for t, h in zip(texts, hops)], self.sec.max_turns,
                             self.sec.examiner_max_new_tokens)
        out = []
        for i, (d, h, tr, text) in enumerate(zip(docs, hops, trajs, texts)):
            q, a = parse_question_answer(tr.turns[-1]["text"] if tr.turns else "")
            out.append(Question(f"{step}:{tag}{i}", str(d.id), text, h, tr, q, a, examiner_format(tr.turns, h)))
        gate_questions(out, self.cfg.gate)
        return out

    def student_questions(self, step: int) -> tuple[list[Question], list[Question]]:
        """(valid questions for the Student batch, every question drawn): examiner batches of
        ``train.prompts_per_step`` passages until that many questions are valid or
        ``student_draw_rounds`` batches were drawn; the batch keeps the first ``prompts_per_step``."""
        want, drawn = self.cfg.train.prompts_per_step, []
        for round_ in range(self.sec.student_draw_rounds):
            drawn += self.examine(step, f"s{round_}.")
            if sum(q.valid for q in drawn) >= want:
                break
        return [q for q in drawn if q.valid][:want], drawn

    def answer(self, questions: list[Question], n: int) -> None:
        """n Student attempts per valid question (in one batched multi-turn rollout)."""
        valid = [q for q in questions if q.valid]
        if not valid:
            return
        trajs = self.rollout(STUDENT, [student_prompt(q.question) for q in valid for _ in range(n)], self.sec.max_turns,
                             self.sec.student_max_new_tokens)
        for j, q in enumerate(valid):
            q.attempts = trajs[j * n:(j + 1) * n]
            q.correct = [bool(exact_match(t.final or "", q.answer)) for t in q.attempts]
            if self.cfg.train.control == "random-reward":  # a control: the Student's verdicts are coin flips, the
                q.correct = [bool(x) for x in control_rewards(self.ctx, q.correct)]  # Examiner's reward from them

    # -- the two stages ------------------------------------------------------------------------
    def examiner_step(self, step: int) -> None:
        t0 = time.perf_counter()
        questions = self.examine(step)
        self.answer(questions, self.sec.student_attempts)
        gate = self.cfg.gate
        rewards = examiner_rewards(questions, self.sec.student_attempts, self.sec.format_weight, gate.template_penalty,
                                   (gate.format_penalty, gate.rule_penalty) if self.sec.invalid_reward == "gate"
                                   else None)
        adv = examiner_advantages(rewards, [q.hops for q in questions])
        samples = [Sample.from_trajectory(q.trajectory, a, role=EXAMINER, temperature=q.trajectory.temperature)
                   for q, a in zip(questions, adv)]
        gen_seconds = time.perf_counter() - t0
        metrics = self.ctx.update(samples).get(EXAMINER, {})
        valid = [q for q in questions if q.valid]
        self.ctx.log(step, EXAMINER, {
            **metrics, "reward_mean": sum(rewards) / len(rewards), "valid_rate": len(valid) / len(questions),
            "format_reward": sum(q.r_fmt for q in questions) / len(questions),
            "student_pass_rate": (sum(sum(q.correct) for q in valid) / max(len(valid) * self.sec.student_attempts, 1)),
            "searches": sum(q.trajectory.n_searches for q in questions) / len(questions),
            "gen_seconds": gen_seconds, **{f"hops_{h}": sum(q.hops == h for q in questions)
                                           for h in range(1, len(self.sec.hop_weights) + 1)},
            **hop_mix(questions, len(self.sec.hop_weights)),
            **gate_metrics([q.reason for q in questions], [q.answer for q in questions if q.valid],
                           [q.cluster for q in questions if q.valid]),
            "zero_variance_groups": zero_variance_groups(
                [[r for r, q in zip(rewards, questions) if q.hops == h] for h in sorted({q.hops for q in questions})])})
        attempts = [t for q in valid for t in q.attempts]  # untrained in this stage
        if attempts:
            self.ctx.log(step, STUDENT, {"truncated_rate": truncated_rate(attempts)})
        self.ctx.samples(step, self.records(step, questions, rewards, EXAMINER))

    def student_step(self, step: int, iteration: int) -> None:
        t0 = time.perf_counter()
        questions, drawn = self.student_questions(step)
        G = self.cfg.rollout.group_size
        self.answer(questions, G)
        lam = lambda_for_iteration(self.sec.distill_lambdas, iteration)
        samples = []
        for q in questions:
            rewards = torch.tensor([[float(c) for c in q.correct]])  # [1, G]
            adv = self.grpo(rewards)[0].tolist()
            teacher_ids = chat(self.tok, None, teacher_prompt(q.question, q.qcp))
            samples += [Sample.from_trajectory(t, a, role=STUDENT, temperature=t.temperature,
                                               teacher_prompt_ids=teacher_ids) for t, a in zip(q.attempts, adv)]
        gen_seconds = time.perf_counter() - t0
        extra = make_distill_loss(self.ctx.policy, self.teacher, self.sec.distill_top_k, self.sec.divergence, lam)
        metrics = self.ctx.update(samples, extra_loss=extra).get(STUDENT, {}) if samples else {}
        self.teacher.update(self.ctx.policy.model)
        self.ctx.state["teacher"] = self.teacher.state_dict()
        attempts = [t for q in questions for t in q.attempts]
        self.ctx.log(step, STUDENT, {
            **metrics, "lambda": lam, "questions": len(questions), "passages_drawn": float(len(drawn)),
            "zero_variance_groups": zero_variance_groups([q.correct for q in questions]),
            "truncated_rate": truncated_rate(attempts), "searches_refused": searches_refused(attempts),
            "exact_match": sum(sum(q.correct) for q in questions) / max(len(attempts), 1),
            "searches": sum(t.n_searches for t in attempts) / max(len(attempts), 1),
            "response_length": sum(t.n_model_tokens for t in attempts) / max(len(attempts), 1),
            "gen_seconds": gen_seconds})
        self.ctx.log(step, EXAMINER, {"truncated_rate": truncated_rate([q.trajectory for q in drawn]),  # untrained
                                      "searches_refused": searches_refused([q.trajectory for q in drawn]),
                                      "valid_rate": sum(q.valid for q in drawn) / max(len(drawn), 1),
                                      **hop_mix(questions, len(self.sec.hop_weights))})
        self.ctx.samples(step, self.records(step, questions, None, STUDENT))

    def records(self, step: int, questions: list[Question], rewards: list[float] | None, stage: str) -> list[dict]:
        """Sink records: every examiner question (task, QCP in data) and its Student attempts."""
        out = []
        for i, q in enumerate(questions):
            n = len(q.attempts)
            out.append({
                "kind": "task", "key": q.key, "role": EXAMINER, "step": step, "question": q.question or "",
                "answer": q.answer or "", "valid": q.valid, "pass_rate": sum(q.correct) / n if n else None,
                "document_id": q.document_id, "format": f"{q.hops}-hop",
                "data": {"hops": q.hops, "qcp": q.qcp, "r_fmt": q.r_fmt, "stage": stage, "invalid_reason": q.reason,
                         "gate_rule": rule_of(q.reason), "cluster_share": q.cluster_share,
                         "reward": rewards[i] if rewards else None, "examiner": q.trajectory.to_attempt()}})
            for j, (t, ok) in enumerate(zip(q.attempts, q.correct)):
                out.append({"kind": "attempt", "key": f"{q.key}:s{j}", "task_key": q.key, "role": STUDENT,
                            "step": step, "reward": float(ok), **t.to_attempt(),
                            "data": {"final": t.final, "searches": t.n_searches, "stage": stage}})
        return out


def run_piplay(ctx) -> None:
    play = PiPlay(ctx)
    for step in ctx.steps():
        iteration, stage = stage_of(step, play.sec)
        ctx.log(step, "schedule", schedule_metrics(step, play.sec.examiner_steps, play.sec.student_steps))
        if stage == EXAMINER:
            play.examiner_step(step)
        else:
            play.student_step(step, iteration)
