"""SCOPE: search-turn sampling, Challenger/Solver prompts, format rewards and reward wiring."""

import random

import pytest

from trainer.methods.parts import stratified_counts, stratified_draw
from trainer.methods.scope_prompts import TASK_TYPES, challenger_prompt, parse_task, solver_prompt


def _turns(*assistant):
    """A trajectory's turns: assistant texts with a tool response after every non-final one."""
    out = []
    for i, text in enumerate(assistant):
        out.append({"role": "assistant", "text": text})
        if i < len(assistant) - 1:
            out.append({"role": "tool", "text": "<information>Doc 1 ...</information>"})
    return out


def test_it_allocates_search_turns_in_the_4_3_2_ratio():
    assert stratified_counts(9, [4, 3, 2]) == [4, 3, 2]
    assert stratified_counts(18, [4, 3, 2]) == [8, 6, 4]
    # 4 prompts: exact 1.78, 1.33, 0.89 -> floors 1,1,0, largest remainders .89 then .78 -> [2, 1, 1]
    assert stratified_counts(4, [4, 3, 2]) == [2, 1, 1]
    draws = stratified_draw(90, [4, 3, 2], random.Random(0))
    assert sorted(set(draws)) == [1, 2, 3]
    assert [draws.count(n) for n in (1, 2, 3)] == [40, 30, 20]


def test_it_rejects_bad_ratios_with_a_clear_message():
    with pytest.raises(ValueError, match="positive sum"):
        stratified_counts(3, [0, 0])


def test_the_challenger_prompt_names_type_count_and_document():
    text = challenger_prompt("Doc about the SS El Faro.", "planning", 2)
    assert "**Planning**" in text and "**2**" in text and "SS El Faro" in text
    assert "<task><question>" in text
    with pytest.raises(ValueError, match="unknown SCOPE task type"):
        challenger_prompt("d", "poetry", 1)
    assert set(TASK_TYPES) == {"long_form_qa", "summarisation", "planning", "writing"}
    assert "at most 3 times" in solver_prompt("Why?", 3) and "Question: Why?" in solver_prompt("Why?", 3)


def test_it_parses_the_task_question():
    assert parse_task("<think>x</think><task><question> Compare A and B. </question></task>") == "Compare A and B."
    assert parse_task("<task>Compare A and B.</task>") == "Compare A and B."
    assert parse_task("no task here") is None
    assert parse_task("<task><question></question></task>") is None


# --- recipe wiring: reward numbers on crafted inputs ---------------------------------------------

from trainer.method_configs import ScopeSection  # noqa: E402
from trainer.methods.scope import Attempt, Rubric, Task, challenger_reward, in_window, solver_reward, stage_of  # noqa: E402
from trainer.rollout.types import Trajectory  # noqa: E402
from trainer.sink import Control, NullSink, Verdict  # noqa: E402


def _task(fmt=(1.0, 0.5, 1.0), gates=True, mean=0.25, rubrics=3):
    t = Task("1:c0.0", "d1", "doc", "planning", 2, "Plan X.", fmt=dict(zip(("think", "tool", "structure"), fmt)),
             gates={"entity": int(gates), "relevance": int(gates), "passed": gates},
             rubrics=[Rubric(f"1:c0.0:r{j}", f"Identifies point {j}.", "critical") for j in range(rubrics)])
    t.mean_score = mean if gates else None
    return t


def test_challenger_reward_wiring_reproduces_the_formula():
    sec = ScopeSection()
    # r_fmt = (1 + 0.5 + 1)/3 = 0.8333; f_diff(0.25) = 1 - 0.25/0.5 = 0.5 -> 0.5*0.8333 + 0.5 = 0.9167
    assert challenger_reward(_task(), sec, flagged=False) == pytest.approx(0.5 * 2.5 / 3 + 0.5)
    # mean 0.5 -> f_diff 1 -> 0.4167 + 1 = 1.4167
    assert challenger_reward(_task(mean=0.5), sec, False) == pytest.approx(0.5 * 2.5 / 3 + 1.0)
    # gate failure: 0.5 r_fmt (ours) or r_fmt (paper's algorithm box)
    assert challenger_reward(_task(gates=False), sec, False) == pytest.approx(0.5 * 2.5 / 3)
    assert challenger_reward(_task(gates=False), ScopeSection(gate_failure="format"), False) == pytest.approx(2.5 / 3)
    # a flagged task counts as gate-failed; a task whose rubrics failed to parse too
    assert challenger_reward(_task(mean=0.5), sec, True) == pytest.approx(0.5 * 2.5 / 3)
    assert challenger_reward(_task(rubrics=0), sec, False) == pytest.approx(0.5 * 2.5 / 3)
    # r_fmt = 0: zero total reward (paper F.1)
    assert challenger_reward(_task(fmt=(0.0, 0.0, 0.0)), sec, False) == 0.0


def test_solver_reward_wiring_reproduces_the_formula():
    sec = ScopeSection()
    turns = [{"role": "assistant", "text": "<think>a</think><search>q1</search>"}, {"role": "tool", "text": "i"},
             {"role": "assistant", "text": "<think>b</think><search>q2</search>"}, {"role": "tool", "text": "i"},
             {"role": "assistant", "text": "<think>c</think><answer>The answer.</answer>"}]
    # r_fmt 1; g = 2/3; |a| = 1536 -> L = 0.525; searches 2 -> 2/3
    # R_S = 0.525 * 2/3 + 0.5 * 1 + 0.1 * 2/3 = 0.35 + 0.5 + 0.0667 = 0.9167
    assert solver_reward(2 / 3, 1536, turns, 2, sec) == pytest.approx(0.525 * 2 / 3 + 0.5 + 0.1 * 2 / 3)
    # short answer: L = 1 -> 2/3 + 0.5 + 0.0667
    assert solver_reward(2 / 3, 100, turns, 2, sec) == pytest.approx(2 / 3 + 0.5 + 0.2 / 3)
    # one-turn answer without think: think 0, tool 0, answer 1 -> r_fmt 1/3; no search
    one = [{"role": "assistant", "text": "<answer>x</answer>"}]
    assert solver_reward(1.0, 2048, one, 0, sec) == pytest.approx(0.05 + 0.5 / 3)


def test_rubric_score_stages_and_filter_window():
    a = Attempt(Trajectory(prompt_ids=[1]), grades=[1.0, 0.0, 1.0])
    assert a.rubric_score == pytest.approx(2 / 3) and Attempt(Trajectory(prompt_ids=[1])).rubric_score == 0.0
    sec = ScopeSection(challenger_steps=2, solver_steps=3)
    assert [stage_of(s, sec) for s in (1, 2, 3, 5, 6)] == [(0, "challenger"), (0, "challenger"), (0, "solver"),
                                                          (0, "solver"), (1, "challenger")]
    assert in_window(0.2, sec) and in_window(0.8, sec) and not in_window(0.81, sec) and not in_window(None, sec)


def test_a_pool_task_survives_a_checkpoint_round_trip():
    t = _task()
    back = Task.from_state(t.to_state())
    assert back.rubrics == t.rubrics and back.gates == t.gates and back.trajectory is None


# --- human review and end to end on CPU (tiny random model, in-memory BM25 corpus) ----------------

CORPUS = [
    {"title": "SS El Faro", "text": "SS El Faro was an American cargo ship that sank on 1 October 2015 during "
     "Hurricane Joaquin near the Bahamas; all 33 crew members were lost."},
    {"title": "Hurricane Joaquin", "text": "Hurricane Joaquin was a powerful Atlantic hurricane in 2015 that struck "
     "the Bahamas."},
    {"title": "NTSB", "text": "The National Transportation Safety Board investigates transport accidents in the "
     "United States."},
]


@pytest.fixture
def corpus_path(tmp_path):
    import json

    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in CORPUS))
    return path


def scope_config(tiny_config, corpus_path, steps=3, **scope):
    return tiny_config("scope", train={"steps": steps, "kl_coef": 1e-3},
                       rollout={"max_new_tokens": 32, "group_size": 2}, corpus={"path": str(corpus_path)},
                       scope={"iterations": 1, "challenger_steps": 2, "solver_steps": 1, "challenger_prompts_per_step": 2,
                              "solver_prompts_per_step": 2, "scoring_rollouts": 2, "filter_rollouts": 2,
                              "candidate_rounds": 1, "max_turns": 2, "max_tool_tokens": 32,
                              "judge_max_new_tokens": 16, **scope})


class VerdictSink(NullSink):
    """A sink whose control() hands over queued review verdicts once (what the web's sink does)."""

    def __init__(self):
        self.queue = []

    def control(self):
        out, self.queue = self.queue, []
        return Control(verdicts=out)


@pytest.fixture
def scope_ctx(tiny_config, corpus_path):
    from trainer.config import load_config
    from trainer.context import RecipeContext
    from trainer.engine import make_engine
    from trainer.methods.scope import Scope
    from trainer.models import load_policy
    from trainer.runner import make_generator
    from trainer.tools.bm25 import InMemoryRetriever
    from trainer.tools.corpus import JsonlDocumentSource

    cfg = load_config(scope_config(tiny_config, corpus_path))
    policy = load_policy(cfg)
    ctx = RecipeContext(config=cfg, policy=policy, generator=make_generator(cfg, policy),
                        engine=make_engine(cfg, policy), sink=VerdictSink(),
                        retriever=InMemoryRetriever.from_jsonl(corpus_path),
                        documents=JsonlDocumentSource.from_jsonl(corpus_path))
    return ctx, Scope(ctx)


def test_an_edited_rubric_replaces_the_judges_text_and_a_flagged_one_is_dropped(scope_ctx):
    ctx, scope = scope_ctx
    task = _task()
    ctx.state["pool"] = [task.to_state()]
    ctx.verdicts = [Verdict("rubric", "1:c0.0:r1", "approve", edit="Explains the 2015 sinking cause."),
                    Verdict("rubric", "1:c0.0:r2", "flag")]
    scope.apply_verdicts()
    pooled = Task.from_state(ctx.state["pool"][0])
    live = scope.rubrics_of(pooled)
    assert [r.text for r in live] == ["Identifies point 0.", "Explains the 2015 sinking cause."]
    answered = Trajectory(prompt_ids=[1], final="A long answer.", turns=[{"role": "assistant", "text": "x"}])
    silent = Trajectory(prompt_ids=[1], final=None)
    attempts = {pooled.key: [Attempt(answered), Attempt(silent)]}
    scope.judge_grades([pooled], attempts)
    graded, skipped = attempts[pooled.key]
    assert graded.rubric_keys == ["1:c0.0:r0", "1:c0.0:r1"] and len(graded.grades) == 2
    # the random judge never writes <score>: strict reading -> 0, counted, no crash
    assert graded.grades == [0.0, 0.0] and scope.judge.stats["grade_format_failures"] == 2
    assert skipped.grades == [0.0, 0.0] and scope.counts["no_answer"] == 1


def test_a_flagged_task_leaves_the_pool_and_counts_as_gate_failed(scope_ctx):
    ctx, scope = scope_ctx
    task = _task(mean=0.5)
    scope.review.remember(task.key, task.question)
    ctx.state["pool"] = [task.to_state()]
    ctx.verdicts = [Verdict("task", task.key, "flag")]
    scope.apply_verdicts()
    assert ctx.state["pool"] == []
    flagged = scope.review.is_flagged(task.key, task.question)
    assert flagged and challenger_reward(task, scope.sec, flagged) == pytest.approx(0.5 * 2.5 / 3)
    # the same question written again later is caught by its text
    assert scope.review.is_flagged("9:c1.0", "plan x")


def test_judge_output_that_breaks_format_fails_the_gates_without_crashing(scope_ctx):
    ctx, scope = scope_ctx
    task = _task()
    task.gates, task.question = {}, "Plan a three-day visit to the castle."
    scope.judge_gates([task])
    assert task.gates["passed"] is False and task.gates["entity"] == 0 and task.gates["relevance"] == 0
    assert scope.judge.stats["gate_format_failures"] == 2


def test_the_task_gate_refuses_before_the_judge_is_asked(scope_ctx):
    """A task too short to be one, or pointing at "the passage", fails the gates without a judge call."""
    ctx, scope = scope_ctx
    short, pointing = _task(), _task()
    short.gates, pointing.gates = {}, {}
    pointing.question = "Summarise the main argument of the given passage in three steps."
    before = dict(scope.judge.stats)
    scope.judge_gates([short, pointing])
    assert short.gates["rule"].startswith("task: question has no words") and not short.gate_passed
    assert pointing.gates["rule"].startswith("task: question refers to the document") and not pointing.gate_passed
    assert scope.judge.stats == before  # the judge was not asked
    from types import SimpleNamespace

    short.trajectory = pointing.trajectory = SimpleNamespace(n_searches=0)
    m = scope.task_metrics([short, pointing], [0.0, 0.0], [False, False])
    assert m["gate_no_words_rate"] == 0.5 and m["gate_refers_to_document_rate"] == 0.5


def test_scope_runs_three_steps_on_cpu_with_the_in_memory_retriever(tiny_config, corpus_path, tmp_path):
    import json

    import trainer
    from trainer.tools.bm25 import InMemoryRetriever
    from trainer.tools.corpus import JsonlDocumentSource

    result = trainer.run(scope_config(tiny_config, corpus_path), run_dir=tmp_path / "run",
                         retriever=InMemoryRetriever.from_jsonl(corpus_path),
                         documents=JsonlDocumentSource.from_jsonl(corpus_path))
    assert result.steps == 3 and result.final_checkpoint
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    challenger = [m for m in metrics if m["role"] == "challenger" and "gate_pass_rate" in m]  # its own stage
    solver = [m for m in metrics if m["role"] == "solver" and "pool_size" in m]
    assert len(challenger) == 2 and len(solver) == 1
    assert all(0.0 <= m["format_reward"] <= 1.0 and 0.0 <= m["zero_variance_groups"] <= 1.0 for m in challenger)
    # every role's truncation, trained or not: the Solver stage's pool fill ran Challenger rollouts
    pool_fill = [m for m in metrics if m["role"] == "challenger" and m["step"] == 3]
    assert len(pool_fill) == 1 and 0.0 <= pool_fill[0]["truncated_rate"] <= 1.0
    assert pool_fill[0]["searches_refused"] >= 0  # searches refused to keep the task's reserve
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    tasks = [r for r in samples if r["kind"] == "task"]
    assert {t["data"]["stage"] for t in tasks} == {"challenger", "filter"}
    assert all(t["format"] in ("long_form_qa", "summarisation", "planning", "writing") for t in tasks)
    assert {t["data"]["n_searches"] for t in tasks} <= {1, 2, 3}


def test_an_edited_task_reaches_the_pool_and_the_solvers_next_batch(scope_ctx):
    """A reviewer corrects the questions of two pooled tasks (task Verdicts with an edit, as the sink hands them
    over): the next Solver step asks the corrected question of the task it takes, and the task still waiting in
    the pool holds its corrected question (SCOPE's pool has no gold answer: the answer of an edit is ignored)."""
    import json

    from tests.trainer.test_ssp import PromptLog

    ctx, scope = scope_ctx
    tasks = [_task() for _ in range(3)]
    for i, t in enumerate(tasks):
        t.key, t.question = f"1:c0.{i}", f"Plan visit number {i} to the old castle."
    ctx.state["pool"] = [t.to_state() for t in tasks]  # solver_prompts_per_step 2: the third waits
    edited = {"1:c0.0": "Plan a day at Castle Drogo for a family.", "1:c0.2": "Plan a walk around Hestercombe."}
    ctx.verdicts = [Verdict("task", key, "approve", edit=json.dumps({"question": q, "answer": "ignored"}))
                    for key, q in edited.items()]
    log = ctx.generator = PromptLog(ctx.generator, ctx.policy.tokenizer)
    scope.solver_step(1)

    solver_asked = [p for p in log.prompts if "old castle" in p or "Castle Drogo" in p]
    assert any(edited["1:c0.0"] in p for p in solver_asked)  # the edited task, taken by this step
    assert any(tasks[1].question in p for p in solver_asked)  # the unedited one, as it was
    assert not any(tasks[0].question in p for p in solver_asked)  # never the old text of the edited one
    [waiting] = ctx.state["pool"]
    assert waiting["key"] == "1:c0.2" and waiting["question"] == edited["1:c0.2"] and "answer" not in waiting
    assert ctx.state["review"]["edits"]["1:c0.0"] == {"question": edited["1:c0.0"], "answer": "ignored"}
