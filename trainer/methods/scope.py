"""SCOPE: a Challenger writes open-ended tasks from corpus documents, a Solver answers them with
search, and the frozen base judges (quality gates, task rubrics, strict per-rubric grades).

Per iteration (``scope.iterations``, paper 3):

1. Challenger stage (``challenger_steps``, paper 20): for each of ``challenger_prompts_per_step``
   documents draw a task type (long-form QA, summarisation, planning, writing; uniform) and a
   search count 1/2/3 (4:3:2, stratified per batch); sample G Challenger rollouts with search.
   Every task with r_fmt > 0 goes through the Judge's two gates (entity identifiability, source
   relevance). A task passing both gets 3-5 rubrics (temperature 0) and ``scoring_rollouts``
   (paper 8) Solver rollouts, each graded on each rubric separately, strict 0/1 (temperature 0.6).
   R_C = 0.5 r_fmt + gate x f_diff(mean g); gate failure -> 0.5 r_fmt (``gate_failure``: the
   paper's Eq. 4; its Algorithm 1, line 14 says r_fmt alone, the other choice of the field).
2. Solver stage (``solver_steps``, paper 20): tasks written by the Challenger that pass the gates
   and whose mean rubric score over ``filter_rollouts`` (paper 4) Solver rollouts lies in
   [0.2, 0.8] form the task pool; each step trains the Solver on ``solver_prompts_per_step`` of
   them, G rollouts each, R_S = L(|a|) g + 0.5 r_fmt + 0.1 min(searches/3, 1) with the cosine
   length penalty L. Rubrics are written once per task and reused for every grade.

Both roles: GRPO with std normalisation, KL 1e-3 to the frozen base, lr 1e-6, grad clip 1.0.
Judge output that breaks format (no score tag, extra text, no rubric) reads strictly: a gate
fails, a grade is 0, a task without rubrics is dropped; each case is counted in the metrics.

Human review (``sink.control().verdicts``): a flagged task never trains the Solver and counts
as gate-failed for the Challenger; an edited rubric (``Verdict(kind="rubric", edit=...)``)
replaces the Judge's text for that task in every later grade; a flagged rubric is dropped
from later grades (ours) while the task keeps at least one.

Policies (``model.policies``): separate by default, as in the paper: the Challenger and the Solver
each train their own LoRA adapter, with its own optimizer state and checkpoint entry, over one
frozen base (the Judge and KL reference: every adapter switched off), and each rollout runs its
role's adapter; so "the previous Solver" that scores Challenger tasks is the Solver adapter, which
the Challenger stage does not move. ``model.policies: shared`` trains one set of weights for both
roles (full fine-tune possible); the previous Solver is then the current policy in the Solver role.

Schedule: ``scope.iterations`` (paper 3) of ``challenger_steps`` then ``solver_steps`` (paper 20 +
20); train.steps defaults to iterations x (challenger_steps + solver_steps) = 120, and role
``schedule`` reports the iteration and stage of every step. At the start of each Solver stage the
task pool is rebuilt with the new Challenger's tasks: ``solver_tasks`` of them (paper 5,120 = 20 x
256), bounded by ``candidate_rounds`` Challenger batches per batch of tasks needed.

Token budgets: Challenger and Solver trajectories ``rollout.max_new_tokens`` (paper 8192); the
Judge ``gate_max_new_tokens`` (ours 8192), ``rubric_max_new_tokens`` (paper 8,192) and
``grade_max_new_tokens`` (paper 16,384), all capped by ``judge_max_new_tokens`` when set (CPU
demo). Each role's truncation rate is a metric (the Judge's under role ``judge``). Run it::

    python -m trainer run examples/scope_cpu.yaml --out var/runs/scope

Departures from the paper (visible config fields where a choice):
- separate policies are LoRA adapters (rank 64, alpha 32 by default) over one frozen base; the paper
  fine-tunes two full models at lr 1e-6. train.lr stays the paper's 1e-6 and the adapters train at
  ``model.lora.lr: auto`` = 1e-6 x sqrt(3) x hidden_size / alpha (8.3e-5 for the 1.5B's 1536): measured on
  SmolLM2-135M (benchmarks/lora_lr.py), one Adam step of an adapter at 1e-6 moved the objective 0.034 as far
  as a full fine-tune step (1/29; the 1.5B would be ~1/83), at auto 1.07; ``model.lora.lr: train`` keeps 1e-6;
- the Challenger runs its searches then writes the task within ``n_searches + 1`` turns; the
  Solver has ``max_turns`` 4 (ours; the paper's evaluation allows 5 search turns);
- the gate budget is ours (the paper gives none); the Solver pool's fill is bounded
  (``candidate_rounds``) where the paper generates until 5,120 tasks pass; a pool short of tasks is
  topped up during the stage;
- searching rollouts keep ``rollout.answer_reserve_tokens`` (default a quarter of the budget) for the
  Challenger's task and the Solver's answer:
  search results are cut to keep it, and a search with no room left is refused with a note; the result of
  a search in the turn before the last says it was the last search (``multi_turn.LAST_TURN``) (ours; the
  paper states none);
- learning-rate warmup is 1 step (``train.warmup_steps``; the paper: a warmup ratio of 0.03);
- Qwen3's per-turn datums (thinking trimmed from earlier turns) are not reproduced: a trajectory
  trains as one sequence.
"""
from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field

import torch

from trainer.algos import get_advantage
from trainer.judge import make_judge
from trainer.methods.parts import (
    assistant_texts,
    schedule,
    schedule_metrics,
    searches_refused,
    stratified_draw,
    truncated_rate,
    zero_variance_groups,
)
from trainer.methods.review import ReviewState
from trainer.methods.scope_prompts import TASK_TYPES, challenger_prompt, parse_task, solver_prompt
from trainer.prompts import chat
from trainer.methods.gate import GateTask, check_task, gate_metrics
from trainer.rewards import (control_rewards, scope_challenger_reward, scope_format_parts, scope_rubric_score,
                             scope_solver_reward)
from trainer.rollout.multi_turn import multi_turn_rollout
from trainer.tools.search import SearchTool
from trainer.tools.corpus import truncate_to_tokens
from trainer.update import Sample

CHALLENGER, SOLVER = "challenger", "solver"


@dataclass
class Rubric:
    key: str
    text: str
    priority: str
    flagged: bool = False


@dataclass
class Task:
    """One Challenger task and everything the Judge said about it (plain data: it is checkpointed)."""

    key: str
    document_id: str
    document: str  # the (truncated) source document
    task_type: str
    n_searches: int
    question: str | None
    fmt: dict = field(default_factory=dict)  # think / tool / structure
    gates: dict = field(default_factory=dict)  # entity, relevance, passed, texts, well_formed
    rubrics: list[Rubric] = field(default_factory=list)
    mean_score: float | None = None
    trajectory: object = field(default=None, repr=False)  # the Challenger rollout (not checkpointed)

    def to_state(self) -> dict:
        """Plain data for the checkpointed task pool."""
        return {**{k: v for k, v in asdict(self).items() if k != "trajectory"},
                "rubrics": [asdict(r) for r in self.rubrics]}

    @classmethod
    def from_state(cls, d: dict) -> "Task":
        return cls(**{**d, "rubrics": [Rubric(**r) for r in d["rubrics"]]})

    @property
    def r_fmt(self) -> float:
        return sum(self.fmt.values()) / len(self.fmt) if self.fmt else 0.0

    @property
    def gate_passed(self) -> bool:
        return bool(self.gates.get("passed"))

    def live_rubrics(self) -> list[Rubric]:
        kept = [r for r in self.rubrics if not r.flagged]
        return kept or self.rubrics[:1]


@dataclass
class Attempt:
    """One Solver rollout and its strict per-rubric grades."""

    trajectory: object
    grades: list[float] = field(default_factory=list)  # 0/1 per live rubric
    judge_texts: list[str] = field(default_factory=list)
    rubric_keys: list[str] = field(default_factory=list)

    @property
    def rubric_score(self) -> float:
        """Rubric score: fraction of rubrics passed (uniform weights)."""
        return scope_rubric_score([s >= 1.0 for s in self.grades]) if self.grades else 0.0


def stage_of(step: int, sec) -> tuple[int, str]:
    """(0-based iteration, "challenger" | "solver") of a 1-based step."""
    iteration, stage, _ = schedule(step, sec.challenger_steps, sec.solver_steps)
    return iteration, (CHALLENGER, SOLVER)[stage]


def challenger_reward(task: Task, sec, flagged: bool) -> float:
    """R_C of one Challenger rollout; a flagged task counts as gate-failed."""
    passed = task.gate_passed and bool(task.rubrics) and task.mean_score is not None and not flagged
    return scope_challenger_reward(task.r_fmt, passed, task.mean_score if passed else None, sec.difficulty_tau,
                                   sec.challenger_format_weight, sec.challenger_difficulty_weight, sec.gate_failure)


def solver_reward(g: float, answer_tokens: int, turns: list[dict], n_searches: int, sec) -> float:
    """R_S of one Solver rollout (format parts from its assistant turns)."""
    parts = scope_format_parts(assistant_texts(turns), "solver")
    r_fmt = sum(parts.values()) / len(parts)
    return scope_solver_reward(g, answer_tokens, r_fmt, n_searches, sec.solver_rubric_weight,
                               sec.solver_format_weight, sec.solver_search_weight, sec.search_reward_turns,
                               sec.length_soft, sec.length_hard, sec.length_floor)


def in_window(mean_score: float | None, sec) -> bool:
    return mean_score is not None and sec.filter_low <= mean_score <= sec.filter_high


class Scope:
    """The recipe's state across steps: tool, judge, review flags, rubric edits and the task pool."""

    def __init__(self, ctx):
        if ctx.retriever is None or ctx.documents is None:
            raise ValueError("SCOPE needs a corpus for documents and search: set corpus.path (JSONL with title and "
                             "text) or launch it on a corpus")
        self.ctx, self.cfg, self.sec = ctx, ctx.config, ctx.config.scope
        self.tok = ctx.policy.tokenizer
        self.tool = SearchTool(ctx.retriever, k=self.sec.top_k, max_tokens=self.sec.max_tool_tokens,
                               tokenizer=self.tok)
        self.judge = make_judge(ctx, max_tokens=self.sec.judge_budgets(),
                                temperature={"gate": 0.0, "rubrics": self.sec.rubric_temperature,
                                             "grade": self.sec.grading_temperature})
        self.grpo = get_advantage("grpo")
        self.review = ReviewState()
        self.review.load_state_dict(ctx.state.get("review", {}))
        ctx.state.setdefault("pool", [])  # filtered tasks (dicts) waiting for the Solver
        ctx.state.setdefault("rubric_edits", {})  # rubric key -> edited text | None (flagged)
        self.counts: dict[str, float] = {}
        self.pool_trajectories: list = []  # Challenger rollouts of a Solver step's pool fill (not trained)

    def rng(self) -> random.Random:
        return random.Random(int(self.ctx.rng.integers(2**31)))

    def count(self, key: str, n: float = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    # -- human review ---------------------------------------------------------------------------
    def apply_verdicts(self) -> None:
        """Task flags (ReviewState) and rubric edits/flags; edits reach tasks still in the pool."""
        verdicts = self.ctx.take_verdicts()
        self.review.apply(verdicts)
        edits = self.ctx.state["rubric_edits"]
        for v in verdicts:
            if v.kind == "rubric" and v.edit and v.edit.strip():
                edits[v.key] = v.edit.strip()
            elif v.kind == "rubric" and v.verdict == "flag":
                edits[v.key] = None
        self.ctx.state["pool"] = [t for t in self.ctx.state["pool"]
                                  if not self.review.is_flagged(t["key"], t["question"])]
        self.review.apply_edits(self.ctx.state["pool"])  # a pooled task's question as the reviewer edited it
        self.ctx.state["review"] = self.review.state_dict()

    def rubrics_of(self, task: Task) -> list[Rubric]:
        """The task's rubrics with every human edit applied (flagged ones marked)."""
        edits = self.ctx.state["rubric_edits"]
        for r in task.rubrics:
            if r.key in edits:
                if edits[r.key] is None:
                    r.flagged = True
                else:
                    r.text = edits[r.key]
        return task.live_rubrics()

    # -- generation -------------------------------------------------------------------------------
    def challenge(self, step: int, n_docs: int, group: int, tag: str) -> list[list[Task]]:
        """``group`` Challenger rollouts for each of ``n_docs`` documents -> tasks (parsed, format-scored)."""
        rng = self.rng()
        docs = self.ctx.documents.sample(n_docs, rng)
        searches = stratified_draw(len(docs), self.sec.search_turn_weights, rng)
        types = [rng.choice(self.sec.task_types) for _ in docs]
        texts = [truncate_to_tokens(f"(Title: {d.title})\n{d.text}", self.tok, self.sec.max_document_tokens)
                 for d in docs]
        prompts = [chat(self.tok, None, challenger_prompt(t, task_type, n))
                   for t, task_type, n in zip(texts, types, searches) for _ in range(group)]
        trajs: list = [None] * len(prompts)
        for n in sorted(set(searches)):  # n searches, then the task: n + 1 turns
            rows = [k for k in range(len(prompts)) if searches[k // group] == n]
            params = self.ctx.sampling_params()
            with self.ctx.policy.acting(CHALLENGER):
                rollouts = multi_turn_rollout(self.ctx.generator, self.tok, [prompts[k] for k in rows], params,
                                              self.tool, max_turns=n + 1, final_tag="task",
                                              answer_reserve=self.ctx.config.rollout.answer_reserve_tokens)
            for k, traj in zip(rows, rollouts):
                trajs[k] = traj
        out = []
        for i, (d, text, task_type, n) in enumerate(zip(docs, texts, types, searches)):
            row = []
            for j in range(group):
                traj = trajs[i * group + j]
                turns = assistant_texts(traj.turns)
                row.append(Task(f"{step}:{tag}{i}.{j}", str(d.id), text, task_type, n,
                                parse_task(turns[-1] if turns else ""),
                                fmt=scope_format_parts(turns, "challenger", n), trajectory=traj))
            out.append(row)
        return out

    def judge_tasks(self, tasks: list[Task], n_rollouts: int) -> dict[str, list]:
        """Gates -> rubrics -> ``n_rollouts`` Solver rollouts graded per rubric, for every task that
        parsed with r_fmt > 0. Returns task key -> Solver trajectories (with ``.grades``)."""
        todo = [t for t in tasks if t.question and t.r_fmt > 0]
        self.judge_gates(todo)
        passed = [t for t in todo if t.gate_passed]
        self.judge_rubrics(passed)
        ready = [t for t in passed if t.rubrics]
        attempts = self.solve(ready, n_rollouts)
        for t in ready:
            t.mean_score = sum(a.rubric_score for a in attempts[t.key]) / len(attempts[t.key])
        return attempts

    def solve(self, tasks: list[Task], n: int) -> dict[str, list[Attempt]]:
        """n Solver rollouts per task, each graded on each of the task's (edited) rubrics."""
        if not tasks:
            return {}
        prompts = [chat(self.tok, None, solver_prompt(t.question, max(self.sec.max_turns - 1, 1)))
                   for t in tasks for _ in range(n)]
        params = self.ctx.sampling_params()
        with self.ctx.policy.acting(SOLVER):
            trajs = multi_turn_rollout(self.ctx.generator, self.tok, prompts, params, self.tool,
                                       max_turns=self.sec.max_turns,
                                       answer_reserve=self.ctx.config.rollout.answer_reserve_tokens)
        by_task = {t.key: [Attempt(traj) for traj in trajs[i * n:(i + 1) * n]] for i, t in enumerate(tasks)}
        self.judge_grades(tasks, by_task)
        return by_task

    # -- the Judge (frozen base) --------------------------------------------------------------------
    def judge_gates(self, tasks: list[Task]) -> None:
        """Gate 1 (entity identifiability) and gate 2 (relevance to the source document), 0/1 each;
        output that breaks the strict format reads as a fail (counted by the judge)."""
        if not tasks:
            return
        gate = self.cfg.gate
        for t in tasks:  # the task gate's rules first (trainer/methods/gate.py): a refused task is a gate failure
            why = check_task(GateTask(t.question, "", t.document), max_copy_ratio=gate.copy_ratio,
                             require_grounding=False)  # open-ended: no answer to copy; relevance is the judge's gate
            if why:
                t.gates = {"entity": 0, "relevance": 0, "passed": False, "rule": f"task: {why}"}
        tasks = [t for t in tasks if not t.gates.get("rule")]
        if not tasks:
            return
        questions = [t.question for t in tasks]
        entity = self.judge.gate("entity", questions, with_texts=True)
        relevance = self.judge.gate("relevance", questions, [t.document for t in tasks], with_texts=True)
        for t, (e, e_text), (r, r_text) in zip(tasks, entity, relevance):
            t.gates = {"entity": e, "relevance": r, "passed": bool(e and r),
                       "entity_text": e_text or "", "relevance_text": r_text or ""}

    def judge_rubrics(self, tasks: list[Task]) -> None:
        """3-5 rubrics per task from the task, its source document and the Challenger's evidence;
        written once, reused for every later grade. A task whose list fails to parse gets none."""
        if not tasks:
            return
        items = []
        for t in tasks:
            evidence = list(dict.fromkeys(p.text for p in (t.trajectory.passages if t.trajectory else [])))
            items.append((t.question, [t.document, *evidence], TASK_TYPES[t.task_type][0]))
        lists = self.judge.write_rubrics_batch(items, self.sec.min_rubrics, self.sec.max_rubrics)
        for t, rubrics in zip(tasks, lists):
            t.rubrics = [Rubric(f"{t.key}:r{j}", r.text, r.priority) for j, r in enumerate(rubrics)]

    def judge_grades(self, tasks: list[Task], by_task: dict[str, list[Attempt]]) -> None:
        """Every answer against every (edited, unflagged) rubric separately, strict 0/1. A rollout
        without an ``<answer>`` scores 0 on every rubric without asking the Judge."""
        items, where = [], []
        for t in tasks:
            rubrics = self.rubrics_of(t)
            for a in by_task[t.key]:
                a.rubric_keys = [r.key for r in rubrics]
                a.grades, a.judge_texts = [0.0] * len(rubrics), ["(no answer: not graded)"] * len(rubrics)
                if not (a.trajectory.final or "").strip():
                    self.count("no_answer")
                    continue
                for j, r in enumerate(rubrics):
                    items.append((t.question, a.trajectory.final, r.text))
                    where.append((a, j))
        for (a, j), (score, text) in zip(where, self.judge.grade_batch(items, with_texts=True) if items else []):
            a.grades[j], a.judge_texts[j] = float(score), text or "(judge call failed)"

    # -- the two stages ---------------------------------------------------------------------------
    def challenger_step(self, step: int) -> None:
        self.apply_verdicts()
        sec, G = self.sec, self.cfg.rollout.group_size
        t0 = time.perf_counter()
        groups = self.challenge(step, sec.challenger_prompts_per_step, G, "c")
        tasks = [t for row in groups for t in row]
        attempts = self.judge_tasks(tasks, sec.scoring_rollouts)
        flagged = [self.review.is_flagged(t.key, t.question) for t in tasks]
        rewards = [challenger_reward(t, sec, f) for t, f in zip(tasks, flagged)]
        adv = self.grpo(torch.tensor(rewards).view(len(groups), G)).flatten().tolist()  # [docs * G]
        samples = [Sample.from_trajectory(t.trajectory, a, role=CHALLENGER, temperature=t.trajectory.temperature)
                   for t, a in zip(tasks, adv)]
        gen_seconds = time.perf_counter() - t0
        metrics = self.ctx.update(samples).get(CHALLENGER, {})
        for t in tasks:
            self.review.remember(t.key, t.question)
        self.ctx.log(step, CHALLENGER, {**metrics, **self.task_metrics(tasks, rewards, flagged),
                                        "zero_variance_groups": zero_variance_groups(
                                            [rewards[i * G:(i + 1) * G] for i in range(len(groups))]),
                                        "gen_seconds": gen_seconds, **self.take_counts()})
        scored = [a.trajectory for rows in attempts.values() for a in rows]  # the previous Solver: not trained here
        if scored:
            self.ctx.log(step, SOLVER, {"truncated_rate": truncated_rate(scored),
                                        "searches_refused": searches_refused(scored)})
        self.ctx.samples(step, self.records(step, tasks, attempts, rewards, CHALLENGER))

    def fill_pool(self, step: int, need: int) -> list[dict]:
        """Challenger tasks that pass the gates and the [low, high] difficulty window join the pool, in
        batches of ``solver_prompts_per_step`` documents, until it holds ``need`` tasks or
        ``candidate_rounds`` batches per ``solver_prompts_per_step`` tasks needed were tried."""
        pool, records, batch = self.ctx.state["pool"], [], self.sec.solver_prompts_per_step
        for round_ in range(1, self.sec.candidate_rounds * -(-need // batch) + 1):
            if len(pool) >= need:
                break
            tasks = [row[0] for row in self.challenge(step, batch, 1, f"p{round_}.")]
            self.pool_trajectories += [t.trajectory for t in tasks]
            attempts = self.judge_tasks(tasks, self.sec.filter_rollouts)
            for t in tasks:
                self.review.remember(t.key, t.question)
                keep = t.gate_passed and in_window(t.mean_score, self.sec) and not self.review.is_flagged(t.key, t.question)
                self.count("candidates")
                self.count("kept", keep)
                if keep:
                    pool.append(t.to_state())
            records += self.records(step, tasks, attempts, None, "filter")
        return records

    def solver_step(self, step: int, stage_start: bool = False) -> None:
        """One Solver step. At the start of the stage the pool is rebuilt with the new Challenger's
        tasks: ``solver_tasks`` of them (paper 5,120 = 20 steps x 256); later steps take from it and
        top it up only when it runs short."""
        self.apply_verdicts()
        sec, G = self.sec, self.cfg.rollout.group_size
        t0 = time.perf_counter()
        if stage_start:
            self.ctx.state["pool"] = []  # the previous iteration's tasks came from an older Challenger
        records = self.fill_pool(step, sec.pool_size() if stage_start else sec.solver_prompts_per_step)
        if self.pool_trajectories:
            self.ctx.log(step, CHALLENGER, {"truncated_rate": truncated_rate(self.pool_trajectories),
                                            "searches_refused": searches_refused(self.pool_trajectories)})
        self.pool_trajectories = []
        pool = self.ctx.state["pool"]
        tasks = [Task.from_state(d) for d in pool[:sec.solver_prompts_per_step]]
        self.ctx.state["pool"] = pool[sec.solver_prompts_per_step:]
        if not tasks:
            self.ctx.log(step, SOLVER, {"pool_size": 0.0, "tasks": 0.0, **self.take_counts()})
            self.ctx.samples(step, records + [self.event(step, "no task passed the gates and the difficulty window; "
                                                         "the Solver step was skipped", {"stage": "solver"})])
            return
        attempts = self.solve(tasks, G)
        flat = [a for t in tasks for a in attempts[t.key]]
        rewards = [solver_reward(a.rubric_score,
                                 len(self.tok.encode(a.trajectory.final or "", add_special_tokens=False)),
                                 a.trajectory.turns, a.trajectory.n_searches, sec) for a in flat]
        rewards = control_rewards(self.ctx, rewards)  # train.control: coin flips instead
        adv = self.grpo(torch.tensor(rewards).view(len(tasks), G)).flatten().tolist()  # [tasks * G]
        samples = [Sample.from_trajectory(a.trajectory, v, role=SOLVER, temperature=a.trajectory.temperature)
                   for a, v in zip(flat, adv)]
        gen_seconds = time.perf_counter() - t0
        metrics = self.ctx.update(samples).get(SOLVER, {})
        n = len(flat)
        self.ctx.log(step, SOLVER, {
            "zero_variance_groups": zero_variance_groups([rewards[i * G:(i + 1) * G] for i in range(len(tasks))]),
            **metrics, "reward_mean": sum(rewards) / n, "rubric_score": sum(a.rubric_score for a in flat) / n,
            "searches": sum(a.trajectory.n_searches for a in flat) / n, "tasks": len(tasks),
            "response_length": sum(a.trajectory.n_model_tokens for a in flat) / n,
            "pool_size": len(self.ctx.state["pool"]), "gen_seconds": gen_seconds, **self.take_counts()})
        self.ctx.samples(step, records + self.records(step, tasks, attempts, None, SOLVER, rewards))

    # -- reporting --------------------------------------------------------------------------------
    def take_counts(self) -> dict[str, float]:
        """Counters since the last step, plus the Judge's format-failure totals."""
        out, self.counts = self.counts, {}
        for key in ("gate_format_failures", "grade_format_failures", "gate_trailing_text", "grade_trailing_text",
                    "rubric_lists_failed", "backend_failures"):
            out[f"judge_{key}_total"] = float(self.judge.stats.get(key, 0))
        return out

    def task_metrics(self, tasks: list[Task], rewards: list[float], flagged: list[bool]) -> dict[str, float]:
        n = len(tasks)
        judged = [t for t in tasks if t.gates]
        scored = [t.mean_score for t in tasks if t.mean_score is not None]
        return {
            "reward_mean": sum(rewards) / n, "format_reward": sum(t.r_fmt for t in tasks) / n,
            **{f"format_{k}": sum(t.fmt.get(k, 0.0) for t in tasks) / n for k in ("think", "tool", "structure")},
            "task_parsed": sum(bool(t.question) for t in tasks) / n,
            "gate_pass_rate": sum(t.gate_passed for t in judged) / len(judged) if judged else 0.0,
            "gate_entity": sum(t.gates.get("entity", 0) for t in judged) / len(judged) if judged else 0.0,
            "gate_relevance": sum(t.gates.get("relevance", 0) for t in judged) / len(judged) if judged else 0.0,
            **{k: v for k, v in gate_metrics([t.gates.get("rule", "") for t in tasks], [], []).items()
               if k.startswith("gate_")},  # the task gate's refusals by rule, before the judge
            "rubrics_per_task": sum(len(t.rubrics) for t in tasks if t.gate_passed) / max(len(scored), 1),
            "mean_rubric_score": sum(scored) / len(scored) if scored else 0.0,
            "in_window": sum(in_window(s, self.sec) for s in scored) / n, "flagged": sum(flagged),
            "searches": sum(t.trajectory.n_searches for t in tasks) / n}

    def event(self, step: int, message: str, data: dict) -> dict:
        return {"kind": "event", "key": f"{step}:event", "step": step, "message": message, "data": data}

    def records(self, step: int, tasks: list[Task], attempts: dict, rewards: list[float] | None, stage: str,
                attempt_rewards: list[float] | None = None) -> list[dict]:
        """Sink records: each task (gates in data), its rubrics, its Solver attempts and their grades."""
        out, k = [], 0
        for i, t in enumerate(tasks):
            tried = attempts.get(t.key, [])
            if stage != SOLVER:  # a pool task was reported when it joined the pool
                out.append({
                    "kind": "task", "key": t.key, "role": CHALLENGER, "step": step, "question": t.question or "",
                    "answer": "", "valid": t.gate_passed, "pass_rate": t.mean_score, "document_id": t.document_id,
                    "format": t.task_type,
                    "data": {"stage": stage, "task_type": t.task_type, "n_searches": t.n_searches, "gates": t.gates,
                             "format": t.fmt, "reward": rewards[i] if rewards else None,
                             "challenger": t.trajectory.to_attempt() if t.trajectory is not None else None}})
                out += [{"kind": "rubric", "key": r.key, "task_key": t.key, "step": step, "text": r.text,
                         "priority": r.priority, "data": {}} for r in t.rubrics]
            for j, a in enumerate(tried):
                akey = f"{t.key}:{stage[0]}{j}"
                reward = attempt_rewards[k] if attempt_rewards else a.rubric_score
                k += 1
                out.append({"kind": "attempt", "key": akey, "task_key": t.key, "role": SOLVER, "step": step,
                            "reward": reward, **a.trajectory.to_attempt(),
                            "data": {"stage": stage, "rubric_score": a.rubric_score, "final": a.trajectory.final}})
                out += [{"kind": "grade", "key": f"{akey}:{rk}", "attempt_key": akey, "rubric_key": rk, "step": step,
                         "score": s, "judge_text": text, "data": {}}
                        for rk, s, text in zip(a.rubric_keys, a.grades, a.judge_texts)]
        return out


def run_scope(ctx) -> None:
    scope = Scope(ctx)
    sec = scope.sec
    for step in ctx.steps():
        _, stage, within = schedule(step, sec.challenger_steps, sec.solver_steps)
        ctx.log(step, "schedule", schedule_metrics(step, sec.challenger_steps, sec.solver_steps))
        if stage == 0:
            scope.challenger_step(step)
        else:
            scope.solver_step(step, stage_start=within == 0)
        ctx.log(step, "judge", scope.judge.step_metrics())
