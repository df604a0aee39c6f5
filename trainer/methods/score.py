"""SCORE: one model writes research reports (solver) and judges them (evaluator); a meta-harness
outside the gradient shapes how the evaluator may judge.

Per step (score.txt, Algorithm 1):

1. ``train.prompts_per_step`` queries: from ``score.queries_path`` (JSONL ``{"query"}``), or
   written by the policy from corpus documents (ours; a document whose query does not parse
   gets a templated query from its title, ``score.query_fallback``).
2. The evaluator samples ONE rubric for the batch: the mandatory dimension(s) plus k-1 from the
   pool with weights in [w_min, w_max], under the current harness narrowed for the step by the
   DimensionScheduler (Algorithm 1, lines 8 and 34; trainer/methods/dimension_scheduler.py: a
   dimension left out for 10 steps is required, one chosen 3 steps running sits out a step, and the
   prompt carries each dimension's mean consistency so far). Its output is forced into
   the harness constraints (``constrain_rubric``); ``rubric_followed`` counts how often the
   model's own choice already complied.
3. The solver writes K (``rollout.group_size``, paper 8) reports per query with multi-turn
   search (up to ``max_tool_calls`` turns), seeing the rubric.
4. The evaluator verifies each report with search and scores it 0-10 per dimension (strict
   parsing: a missing or broken score is 0 and counted). R_s = a(r) (1 + sum_j w_j s_j) with
   s_j = score / 10; the depth rule sets R_s to 0 when the evaluator searched fewer times than
   the harness's min_number_of_tool_call.
5. Solver update: GRPO (std-normalised) over each query's K reports, KL 0.05 (k3).
6. Evaluator update: consistency C_i = mean pairwise TF-IDF cosine of the K reports'
   conclusions, R = mean_i C_i, A = R - b with the EMA baseline b <- 0.7 b + 0.3 R (b0 = 0);
   REINFORCE on the rubric that was executed (a second optimizer step, as the paper alternates):
   the model's own tokens when its rubric already satisfied the harness, else the repaired rubric
   re-tokenised (``render_rubric``) with its log-probs under the policy that sampled the rubric,
   so the update credits the rubric whose reports earned the consistency, never raw tokens whose
   dimensions or weights were replaced (``rubric_repaired`` counts these steps).
7. Every M=5 steps the meta-harness driver (``score.meta_harness``: rules | endpoint | human)
   rewrites the harness from the last M steps' statistics; a harness a person edited on the run
   page (``sink.control().harness``) replaces it at that refresh whatever the driver. Every
   harness version goes to the sink as an ``event`` record with the harness JSON in ``data``.
8. Early stop on solver entropy collapse: below ``entropy_collapse_ratio`` x the first step's
   entropy (or below ``entropy_floor``) for ``entropy_patience`` steps -> an event record and
   the run ends after a checkpoint.

Token budgets: a report ``rollout.max_new_tokens`` (paper 4096), of which ``rollout.answer_reserve_tokens``
(default a quarter) stays for the report itself: search results are cut to keep it, and a search
with no room left is refused with a note asking for the report (``searches_refused``), an evaluator turn
``evaluator_max_new_tokens`` (2048: the paper's "evaluator maximum generation length", read per
turn), a whole evaluator trajectory ``evaluator_trajectory_tokens()`` (by default every turn's budget
plus every allowed search's tool output, 9,740 at the defaults: a trajectory budget of 2,048 left
~520 tokens for three searches and the scores once the harness asked for three), a training query
``query_max_new_tokens`` (ours). A cut evaluation has no scores; its share is
``evaluator_truncated_rate`` (role solver, and ``truncated_rate`` of role evaluator) and the rule
driver lowers the minimum searches when it passes 30% and never raises it at 10% or more. The
evaluator searches at most ``evaluator_max_turns - 1`` times (its last turn writes the scores), so
a harness asking for more (``min_number_of_tool_call``) is refused with the reason in its event:
the depth rule would zero every score. The Solver updates in PPO mini-batches of
``mini_batch_size`` queries (paper 32 of 64). Run it::

    python -m trainer run examples/score_cpu.yaml --out var/runs/score

Departures from the paper (ours, visible fields):
- the paper's evaluator judges all K reports in one trajectory; we judge one report per
  trajectory (per-report depth rule, shorter contexts), with ``evaluator_max_turns`` 4 (ours);
- the meta-harness is rule-based by default (the paper: GPT-5.2; an endpoint or a person are options);
- the DimensionScheduler's rules are ours (the paper gives its interface, not its rules);
- scores are 0-10 per dimension (ours); the mandatory dimension's weight is
  ``must_include_weight`` (default weight_max); a(r) = a closed, non-empty ``<answer>``;
- the report's conclusion is its "Conclusion" paragraph, else its last paragraph;
- training queries come from ``queries_path`` or are written from corpus documents (the paper:
  255 Reddit queries);
- the two updates are two optimizer steps, so the learning-rate warmup (``train.warmup_steps``)
  counts both; early stopping on entropy collapse uses ``entropy_collapse_ratio`` (ours);
- the report's reserve (``rollout.answer_reserve_tokens``) is ours; the paper states none; so is the note
  after a search in the turn before the last (reports and evaluations) that it was the last search;
- the evaluation prompt (ours, after the paper's Listing 4) shows the reply's shape: a search first, then one
  ``<score>`` line per rubric dimension; ``parse_scores`` also reads score lines written without their
  ``<scores>`` block; the rubric prompt writes out every line it expects (benchmarks/score_rubric_probe.py);
- the rule driver's depth rule reads the share of VALID reports whose score it zeroed (a share of
  all reports stays low when most reports are cut, while every score that could count is zeroed);
- ``score.grounding: share`` (off by default) multiplies R_s by the share of the report's sentences that the
  passages its own searches retrieved support (``trainer.rewards.grounded_share``); ``grounded_share`` (mean over
  valid reports) is logged either way. The paper's reward has no such term: after 10 steps under the model's own
  evaluator a 1.5B writer's held-out reports were 28% grounded, against 67% for the base's few finished ones (and
  24% for a coin-reward control; benchmarks/RESULTS.md, SCORE).
"""
from __future__ import annotations

import json
import random
import time

import torch

from trainer.algos import EMABaseline, get_advantage
from trainer.methods import harness as mh
from trainer.methods.dimension_scheduler import DimensionScheduler
from trainer.methods.parts import (
    mini_batches,
    searches_refused,
    tag_content,
    truncated_rate,
    update_in_mini_batches,
    zero_variance_groups,
)
from trainer.methods.score_prompts import (
    QUERY_FROM_DOCUMENT,
    SOLVER_SYSTEM,
    constrain_rubric,
    depth_rule,
    evaluation_messages,
    extract_conclusion,
    parse_rubric,
    parse_scores,
    render_rubric,
    report_is_valid,
    rubric_messages,
)
from trainer.prompts import chat
from trainer.rewards import control_rewards, grounded_share, score_consistency, score_solver_reward
from trainer.rollout.multi_turn import multi_turn_rollout, single_turn
from trainer.rollout.types import Trajectory
from trainer.tools.search import SearchTool
from trainer.tools.corpus import truncate_to_tokens
from trainer.update import Sample

SOLVER, EVALUATOR = "solver", "evaluator"


def load_queries(path: str) -> list[str]:
    """Queries from a JSONL file (``{"query": ...}`` per line) or a plain text file (one per line)."""
    from trainer.paths import check_file

    check_file("score.queries_path", path)  # a web worker reads only the datasets folder (trainer/paths.py)
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            if line.startswith("{"):
                try:
                    value = json.loads(line).get("query")
                except (json.JSONDecodeError, AttributeError):
                    raise ValueError(f"{path}:{n} is not a JSON object; write one {{\"query\": ...}} per line") from None
                if not isinstance(value, str) or not value.strip():
                    raise ValueError(f"{path}:{n} has no non-empty \"query\" field")
                rows.append(value.strip())
            else:
                rows.append(line)
    if not rows:
        raise ValueError(f"{path} holds no queries")
    return rows


def title_query(title: str) -> str:
    return f"Write a well-sourced research report on {title}: its background, the key facts and why it matters."


def report_rewards(valid: list[bool], rubric: list[tuple[str, float]], scores: list[dict[str, float]],
                   searches: list[int], min_searches: int, grounded: list[float] | None = None) -> list[float]:
    """R_s of each report with the depth rule applied, times its grounded share when ``grounded`` is given
    (``score.grounding: share``, ours)."""
    weights = [w for _, w in rubric]
    rewards = [depth_rule(score_solver_reward(v, weights, [s[d] for d, _ in rubric]), n, min_searches)
               for v, s, n in zip(valid, scores, searches)]
    return rewards if grounded is None else [r * g for r, g in zip(rewards, grounded)]


def report_grounded(final, turns: list[dict], min_overlap: float = 0.7) -> float:
    """A report's grounded share: its sentences that the passages ITS OWN searches retrieved (the trajectory's tool
    turns) support; 0.0 for a report without an answer."""
    return grounded_share(final, [t.get("text") for t in turns if isinstance(t, dict) and t.get("role") == "tool"],
                          min_overlap)[0]


def grounding(reports: list, min_overlap: float) -> list[float]:
    """Each report's grounded share (``report_grounded``)."""
    return [report_grounded(r.final, r.turns, min_overlap) for r in reports]


def consistency(reports: list[str]) -> float:
    """C_i over one query's K reports (their conclusions); 0 with fewer than 2 reports."""
    return score_consistency([extract_conclusion(r) for r in reports]) if len(reports) >= 2 else 0.0


@torch.no_grad()
def sequence_logprobs(policy, prompt_ids: list[int], completion_ids: list[int], temperature: float) -> list[float]:
    """log p of each completion token given what precedes it, at ``temperature`` (one forward)."""
    ids = torch.tensor([list(prompt_ids) + list(completion_ids)], device=policy.device)  # [1, P + C]
    with policy.autocast():
        logits = policy.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits  # [1, P + C, V]
    start = len(prompt_ids) - 1
    logits = logits[0, start:start + len(completion_ids)].float() / max(temperature, 1e-6)  # [C, V]
    target = torch.tensor(completion_ids, device=logits.device)  # [C]
    return torch.log_softmax(logits, -1).gather(-1, target[:, None])[:, 0].tolist()


def entropy_collapsed(entropy: float, first: float | None, sec) -> bool:
    if sec.entropy_floor is not None and entropy < sec.entropy_floor:
        return True
    return sec.entropy_collapse_ratio is not None and first is not None and entropy < sec.entropy_collapse_ratio * first


class Score:
    def __init__(self, ctx):
        if ctx.retriever is None:
            raise ValueError("SCORE needs a search tool: set corpus.path (JSONL with title and text) or launch it "
                             "on a corpus")
        self.ctx, self.cfg, self.sec = ctx, ctx.config, ctx.config.score
        sec = self.sec
        if not sec.queries_path and ctx.documents is None:
            raise ValueError("SCORE needs training queries: set score.queries_path or give a corpus to write them from")
        self.tok = ctx.policy.tokenizer
        self.pool = [d.lower() for d in sec.dimension_pool]
        self.tool = SearchTool(ctx.retriever, k=sec.top_k, max_tokens=sec.max_tool_tokens, tokenizer=self.tok)
        self.queries = load_queries(sec.queries_path) if sec.queries_path else None
        self.baseline = EMABaseline(sec.baseline_decay)
        self.baseline.load_state_dict(ctx.state.get("baseline", self.baseline.state_dict()))
        self.grpo = get_advantage("grpo")
        self.driver = self.make_driver()
        self.scheduler = DimensionScheduler(self.pool)
        self.scheduler.load_state_dict(ctx.state.get("scheduler", {}))
        self.step_harness, self.scheduled = None, {}
        st = ctx.state
        st.setdefault("window", [])
        if "harness" not in st:
            st["harness"] = mh.starting_harness(sec, self.pool)
            st["harness_version"] = 0

    def make_driver(self):
        sec = self.sec
        if sec.meta_harness == "rules":
            return mh.RuleDriver(self.pool, sec.evaluator_searches())
        if sec.meta_harness == "human":
            return mh.HumanDriver()
        if not sec.harness_endpoint:
            raise ValueError("score.meta_harness=endpoint needs score.harness_endpoint (an OpenAI-compatible base URL)")
        from trainer.judge import EndpointClient, key_env

        client = EndpointClient(sec.harness_endpoint, model=sec.harness_model, api_key_env=key_env(sec.harness_api_key))
        return mh.EndpointDriver(client.chat, self.pool, sec.evaluator_searches())

    @property
    def harness(self) -> dict:
        return self.ctx.state["harness"]

    def rng(self) -> random.Random:
        return random.Random(int(self.ctx.rng.integers(2**31)))

    def ids(self, system: str | None, user: str) -> list[int]:
        return chat(self.tok, system, user)

    # -- 1. queries -----------------------------------------------------------------------------
    def next_queries(self, n: int) -> tuple[list[tuple[str, str | None]], dict]:
        """n (query, document id) pairs and counters."""
        if self.queries is not None:
            cursor = self.ctx.state.get("query_cursor", 0)
            out = [(self.queries[(cursor + i) % len(self.queries)], None) for i in range(n)]
            self.ctx.state["query_cursor"] = (cursor + n) % len(self.queries)
            return out, {"queries_from_file": n}
        docs = self.ctx.documents.sample(n, self.rng())
        prompts = [self.ids(None, QUERY_FROM_DOCUMENT.format(
            title=d.title, text=truncate_to_tokens(d.text, self.tok, self.sec.max_document_tokens))) for d in docs]
        params = self.ctx.sampling_params(max_new_tokens=self.sec.query_max_new_tokens)
        out, written = [], 0
        for d, c in zip(docs, self.ctx.generator.generate(prompts, params)):
            q = tag_content(c.text, "query")
            if q:
                written += 1
                out.append((q, str(d.id)))
            elif self.sec.query_fallback == "title":
                out.append((title_query(d.title), str(d.id)))
        return out, {"queries_written": written, "queries_fallback": len(out) - written}

    # -- 2. rubric --------------------------------------------------------------------------------
    def sample_rubric(self, queries: list[str]):
        """The evaluator's rubric under the harness narrowed by the DimensionScheduler for this step."""
        must = self.harness["dimension_constraints"]["must_include"]
        self.step_harness, pool, self.scheduled = self.scheduler.constrain(self.harness, self.pool, must)
        msgs = rubric_messages(self.step_harness, pool, queries[:8])
        prompt = self.ids(msgs[0]["content"], msgs[1]["content"])
        params = self.ctx.sampling_params(temperature=self.sec.evaluator_temperature,
                                          max_new_tokens=self.sec.evaluator_max_new_tokens)
        traj = single_turn(self.ctx.generator, [prompt], params)[0]
        rubric = constrain_rubric(parse_rubric(traj.text), self.step_harness, pool, self.rng(),
                                  self.sec.must_include_weight)
        return self.executed(traj, rubric), rubric

    def executed(self, traj, rubric):
        """The rubric action the update reinforces: the sampled trajectory when the model's rubric was
        used as written, else the repaired rubric re-tokenised (ending in EOS), with its log-probs under
        the current policy at the sampling temperature (the PPO reference of this one-sample update)."""
        if rubric.followed:
            return traj
        text = render_rubric(rubric.dims, (self.step_harness or self.harness)["dimension_constraints"]["must_include"])
        ids = self.tok.encode(text, add_special_tokens=False)
        if self.tok.eos_token_id is not None:
            ids.append(self.tok.eos_token_id)
        logprobs = sequence_logprobs(self.ctx.policy, traj.prompt_ids, ids, traj.temperature or 1.0)
        return Trajectory(prompt_ids=list(traj.prompt_ids), completion_ids=ids, loss_mask=[1] * len(ids),
                          logprobs=logprobs, text=text, finish_reason="stop", temperature=traj.temperature)

    # -- 3./4. reports and their evaluation ---------------------------------------------------------
    def write_reports(self, queries: list[str], rubric) -> list:
        G = self.cfg.rollout.group_size
        judged_on = "Your report will be judged on: " + ", ".join(f"{d} (weight {w:.2f})" for d, w in rubric.dims)
        prompts = [self.ids(SOLVER_SYSTEM, f"{q}\n\n{judged_on}") for q in queries for _ in range(G)]
        params = self.ctx.sampling_params()
        return multi_turn_rollout(self.ctx.generator, self.tok, prompts, params, self.tool,
                                  max_turns=self.sec.max_tool_calls,
                                  answer_reserve=self.cfg.rollout.answer_reserve_tokens)

    def evaluate(self, queries: list[str], reports: list, rubric) -> list:
        G = self.cfg.rollout.group_size
        prompts = []
        for i, r in enumerate(reports):
            msgs = evaluation_messages(self.harness, rubric.dims, queries[i // G], r.final or r.text,
                                       self.sec.score_scale, can_search=self.sec.evaluator_max_turns > 1)
            prompts.append(self.ids(msgs[0]["content"], msgs[1]["content"]))
        params = self.ctx.sampling_params(temperature=self.sec.evaluator_temperature,
                                          max_new_tokens=self.sec.evaluator_max_new_tokens)  # per turn
        return multi_turn_rollout(self.ctx.generator, self.tok, prompts, params, self.tool,
                                  max_turns=self.sec.evaluator_max_turns, final_tag="scores",
                                  max_total_tokens=self.sec.evaluator_trajectory_tokens())

    # -- one step -------------------------------------------------------------------------------
    def step(self, step: int) -> bool:
        """Run one step; True when training should stop (entropy collapse)."""
        t0 = time.perf_counter()
        G = self.cfg.rollout.group_size
        pairs, query_stats = self.next_queries(self.cfg.train.prompts_per_step)
        if not pairs:
            self.event(step, "no training query this step (every generated query failed to parse)", {})
            return False
        queries = [q for q, _ in pairs]
        rubric_traj, rubric = self.sample_rubric(queries)
        reports = self.write_reports(queries, rubric)
        evals = self.evaluate(queries, reports, rubric)
        dims = [d for d, _ in rubric.dims]
        scores = [parse_scores(e.turns[-1]["text"] if e.turns else "", dims, self.sec.score_scale) for e in evals]
        valid = [report_is_valid(r.final, r.truncated) for r in reports]
        min_search = self.harness["process_constraints"]["min_number_of_tool_call"]
        grounded = grounding(reports, self.sec.grounding_min_overlap)  # ours: claims vs the report's own passages
        rewards = report_rewards(valid, rubric.dims, [s.values for s in scores], [e.n_searches for e in evals],
                                 min_search, grounded if self.sec.grounding == "share" else None)
        rewards = control_rewards(self.ctx, rewards)  # train.control: coin flips instead
        zeroed = [v and e.n_searches < min_search for e, v in zip(evals, valid)]  # a valid report lost its score
        adv = self.grpo(torch.tensor(rewards).view(len(queries), G)).flatten().tolist()  # [n * G]
        gen_seconds = time.perf_counter() - t0

        groups = [[Sample.from_trajectory(r, a, role=SOLVER, temperature=r.temperature)
                   for r, a in zip(reports[i * G:(i + 1) * G], adv[i * G:(i + 1) * G])] for i in range(len(queries))]
        chunks = mini_batches(groups, self.sec.mini_batch_size)  # paper: PPO mini-batch 32 of 64 queries
        solver = update_in_mini_batches(self.ctx, {SOLVER: chunks}).get(SOLVER, {})
        cons = [consistency([r.final or "" for r in reports[i * G:(i + 1) * G]]) for i in range(len(queries))]
        r_eval = sum(cons) / len(cons)
        self.scheduler.update_stats(dims, cons)  # Algorithm 1, line 34
        self.ctx.state["scheduler"] = self.scheduler.state_dict()
        a_eval = self.baseline.advantage(r_eval)
        evaluator = self.ctx.update([Sample.from_trajectory(rubric_traj, a_eval, role=EVALUATOR,
                                                            temperature=rubric_traj.temperature)]).get(EVALUATOR, {})
        self.ctx.state["baseline"] = self.baseline.state_dict()

        n = len(reports)
        record = {"step": step, "solver_reward": sum(rewards) / n, "consistency": r_eval,
                  "valid_report_rate": sum(valid) / n, "evaluator_searches": sum(e.n_searches for e in evals) / n,
                  "depth_zeroed_rate": sum(zeroed) / n, "depth_zeroed_of_valid": sum(zeroed) / max(1, sum(valid)),
                  "evaluator_truncated_rate": truncated_rate(evals),
                  "eval_format_failures": sum(not s.well_formed for s in scores) / n,
                  # over the valid reports (answered, not cut); none valid: not logged (a float only is)
                  "grounded_share": (sum(g for g, v in zip(grounded, valid) if v) / sum(valid)) if any(valid) else None,
                  "dimension_means": {d: sum(s.values[d] for s in scores) / n for d in dims}}
        self.ctx.state["window"] = (self.ctx.state["window"] + [record])[-self.sec.harness_every:]
        self.ctx.log(step, SOLVER, {**solver, **{k: v for k, v in record.items() if isinstance(v, float)},
                                    **query_stats, "reward_std": float(torch.tensor(rewards).std()) if n > 1 else 0.0,
                                    "zero_variance_groups": zero_variance_groups(
                                        [rewards[i * G:(i + 1) * G] for i in range(len(queries))]),
                                    "response_length": sum(r.n_model_tokens for r in reports) / n,
                                    "searches": sum(r.n_searches for r in reports) / n, "gen_seconds": gen_seconds,
                                    "searches_refused": searches_refused(reports),
                                    "harness_version": self.ctx.state["harness_version"],
                                    **{f"score_{d}": v for d, v in record["dimension_means"].items()}})
        self.ctx.log(step, EVALUATOR, {**evaluator, "consistency": r_eval, "advantage": a_eval,
                                       "baseline": self.baseline.value, "rubric_followed": float(rubric.followed),
                                       "rubric_repaired": float(not rubric.followed),
                                       "scheduler_required": float(len(self.scheduled.get("required", []))),
                                       "scheduler_avoided": float(len(self.scheduled.get("avoided", []))),
                                       # dimension usage over steps: each pool dimension's weight (0 = not chosen)
                                       **{f"weight_{d}": dict(rubric.dims).get(d, 0.0) for d in self.pool},
                                       # every evaluator generation, the untrained scoring ones included
                                       "truncated_rate": truncated_rate([rubric_traj, *evals]),
                                       "scoring_truncated_rate": truncated_rate(evals)})
        self.ctx.samples(step, self.records(step, pairs, rubric, reports, evals, scores, rewards, zeroed, cons,
                                            grounded))
        self.refresh_harness(step)
        return self.check_entropy(step, solver.get("entropy"))

    def refresh_harness(self, step: int) -> None:
        """Every M steps: a person's edit if one arrived, else the driver's proposal."""
        if step % self.sec.harness_every:
            return
        stats = mh.summarize(self.ctx.state["window"])
        if self.ctx.harness is not None:
            update = mh.apply_human_edit(self.harness, self.ctx.harness, self.pool,
                                          self.sec.evaluator_searches())
            self.ctx.harness = None
        else:
            update = self.driver.next(self.harness, stats)
        if update.changed:
            self.ctx.state["harness"] = update.harness
            self.ctx.state["harness_version"] += 1
        self.event(step, f"harness v{self.ctx.state['harness_version']} ({update.driver}): {update.reason}",
                   {"harness": self.harness, "version": self.ctx.state["harness_version"], "driver": update.driver,
                    "changed": update.changed, "stats": stats.to_dict()})

    def check_entropy(self, step: int, entropy: float | None) -> bool:
        if entropy is None:
            return False
        st = self.ctx.state
        st.setdefault("first_entropy", entropy)
        st["collapsed_steps"] = st.get("collapsed_steps", 0) + 1 if entropy_collapsed(
            entropy, st["first_entropy"], self.sec) else 0
        self.ctx.log(step, SOLVER, {"entropy_ratio": entropy / st["first_entropy"] if st["first_entropy"] else 0.0})
        if st["collapsed_steps"] >= self.sec.entropy_patience:
            self.event(step, f"early stop: solver entropy collapsed to {entropy:.4g} (first step {st['first_entropy']:.4g}) "
                       f"for {st['collapsed_steps']} steps", {"entropy": entropy, "first_entropy": st["first_entropy"],
                                                               "reason": "entropy_collapse"})
            return True
        return False

    def event(self, step: int, message: str, data: dict) -> None:
        n = self.ctx.state.get("events", 0) + 1
        self.ctx.state["events"] = n
        self.ctx.samples(step, [{"kind": "event", "key": f"{step}:event{n}", "step": step, "message": message,
                                 "data": data}])

    def records(self, step, pairs, rubric, reports, evals, scores, rewards, zeroed, cons, grounded) -> list[dict]:
        G, out = self.cfg.rollout.group_size, []
        for i, (query, doc_id) in enumerate(pairs):
            task_key = f"{step}:q{i}"
            out.append({"kind": "task", "key": task_key, "role": SOLVER, "step": step, "question": query,
                        "answer": "", "valid": True, "pass_rate": None, "document_id": doc_id, "format": "report",
                        "data": {"rubric": rubric.to_dict(), "consistency": cons[i], "scheduler": self.scheduled,
                                 "harness_version": self.ctx.state["harness_version"]}})
            must = set(self.harness["dimension_constraints"]["must_include"])
            for j, (d, w) in enumerate(rubric.dims):
                out.append({"kind": "rubric", "key": f"{task_key}:r{j}", "task_key": task_key, "step": step,
                            "text": d, "priority": "critical" if d in must else "important", "data": {"weight": w}})
            for k in range(i * G, (i + 1) * G):
                akey = f"{task_key}:a{k - i * G}"
                out.append({"kind": "attempt", "key": akey, "task_key": task_key, "role": SOLVER, "step": step,
                            "reward": rewards[k], **reports[k].to_attempt(), "data": {"final": reports[k].final}})
                out.append({"kind": "grade", "key": f"{akey}:g", "attempt_key": akey, "rubric_key": None,
                            "step": step, "score": rewards[k], "judge_text": evals[k].text,
                            "data": {"scores": scores[k].values, "missing": scores[k].missing,
                                     "evaluator_searches": evals[k].n_searches, "depth_zeroed": zeroed[k],
                                     "grounded_share": grounded[k]}})
        return out


def run_score(ctx) -> None:
    score = Score(ctx)
    stop_after = None
    for step in ctx.steps():
        if stop_after is not None:
            ctx.stopped = True
            ctx.checkpoint(stop_after)
            break
        if step == ctx.start_step + 1 and ctx.state.get("harness_version") == 0 and not ctx.state.get("events"):
            score.event(step, "harness v0 (default)", {"harness": score.harness, "version": 0, "driver": "default"})
        if score.step(step):
            stop_after = step  # the step is flushed and logged; the next iteration checkpoints and ends
