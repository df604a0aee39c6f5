"""Everything in one SPICE step that is not generation or the update, timed on the CPU.

Issue 22, item 5: on an H100 (Qwen2.5-Coder-0.5B, 32 documents x 8 Challenger attempts, 8 Reasoner
answers per valid task, 512 tokens) a step took 62.7 s, of which rollout 10.4 s and update 3.1 s.
This replays a step of that size without a model: the generator hands back scripted completions
(tokenized while the workload is built, outside the timed part) and every other function of the
step runs for real on them: the Challenger prompts and chat-template glue, parsing and validity
(``copies_example`` included), selection, the Reasoner prompts, grading (math-verify's helper
process included), rewards, advantages, ``build_samples``, ``step_metrics``, ``records``, the
JSONL sink's writes and the update's micro-batch planning and padding.

    SELFPLAY_DATA_DIR=/work/main/var HF_HUB_OFFLINE=1 python benchmarks/spice_step_cpu.py [--steps 2]

Prints a table: function, calls, cumulative seconds (cProfile, wall clock), over the timed steps
(the first step, which starts math-verify's helper process, is run untimed first unless --cold).
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from trainer.algos import get_advantage
from trainer.config import load_config
from trainer.methods import spice, spice_tasks
from trainer.methods.review import ReviewState
from trainer.rewards import spice_reward_fn
from trainer.rollout.types import Completion
from trainer.sink import JsonlSink
from trainer.tools.corpus import corpus_path, read_jsonl_corpus
from trainer import update as update_mod

TOKENIZER_CACHE = Path(tempfile.gettempdir()) / "selfplay-bench-qwen0.5b-tokenizer"

# ---- the scripted model ------------------------------------------------------------------------

FORMATS = {  # the text after FORMAT_PREFILL for each choice
    "mcq": ' true, "suitable_for_free_form": false, "best_answer_type": null, "reason": "several connected facts"}',
    **{t: f' false, "suitable_for_free_form": true, "best_answer_type": "{t.capitalize()}", '
          f'"reason": "the document gives a {t}"}}' for t in spice_tasks.ANSWER_TYPES},
}
BROKEN_FORMATS = [' maybe, "suitable_for_free_form"', ' true, "suitable_for_free_form": true}',
                  ' false, "suitable_for_free_form": true, "best_answer_type": "Date"}']

def task_spec(kind: str, k: int) -> tuple[str, str, list[str], list[str]]:
    """(question, gold as JSON, right Reasoner answers, wrong ones) of a task; ``k`` varies the
    numbers, so golds differ from task to task (as in a run) and no verdict is shared across tasks."""
    y, f = 1800 + k, f"{k}.5"
    return {
        "integer": (f"In which year did the {{t}} first open, given it was built 12 years after {y - 12}?", str(y),
                    [str(y), f"{y:,}", f"{y}.0", f"\\text{{{y}}}"], [str(y - 1), str(y + 12), "eighteen", f"{y}0"]),
        "float": ("What share of the {t} budget went to research, in percent to one decimal?", f,
                  [f, f"{f}0", f"{f}\\%", f"\\frac{{{2 * k + 1}}}{{2}}"], [f"{k}.4", f"0.{k}5", f"{k}", f"{k}/2"]),
        "expression": ("Writing n for the number of {t} members, what is the total cost as a formula in n?",
                       f'"{k}*n^2 + 2*n"', [f"{k}n^2+2n", f"n({k}n+2)", f"2n + {k}n^2", f"{k} n^{{2}} + 2 n"],
                       [f"{k}n^2", "n^2+2n", f"{k}n+2", f"{2 * k}n"]),
        "string": ("Which city was the {t} founded in?", '"Vienna"', ["Vienna", "vienna", "The Vienna", "VIENNA"],
                   ["Berlin", "Wien", "Budapest", "Prague"]),
        "boolean": ("Was the {t} founded before the railway reached its city?", "true", ["true", "True", "TRUE", "true."],
                    ["false", "False", "no", "yes"]),
        "mcq": ("Which event shaped the {t} most? A) a war B) a treaty C) a flood D) an election", '"B"',
                ["B", "B)", "(B)", "\\text{B}"], ["A", "C", "D", "A)"]),
    }[kind]


BROKEN_TASKS = {  # invalid task turns: broken JSON, copies of the worked example, wrong types
    "integer": ['A school has 12 classes of 25 pupils and 3 classes of 30 pupils; how many pupils?", "answer": 390, '
                '"answer_type": "Integer"}', 'How many?", "answer": "many", "answer_type": "Integer"}'],
    "float": ['What is the ratio?", "answer": "nan", "answer_type": "Float"}'],
    "expression": ['What is the area?", "answer": [1, 2], "answer_type": "Expression"}'],
    "string": ['Who wrote it?", "answer": "a very long answer of many words", "answer_type": "String"}'],
    "boolean": ['Is it old?", "answer": "perhaps", "answer_type": "Boolean"}'],
    "mcq": ['Which one? A) x B) y", "multiple_choice_correct": "B"}', 'Which river? A) a B) b C) c D) d",'],
}


def reasoning(answer: str, rng: random.Random, long: bool) -> str:
    """About 300 tokens of step-by-step text ending with \\boxed{answer} (some without a box)."""
    steps = [f"Step {i + 1}: from the question we know that the quantity is {rng.randint(2, 999)} and the "
             f"related value is {rng.randint(2, 99)}, so we combine them with ${rng.randint(2, 9)} \\times "
             f"{rng.randint(2, 9)} = {rng.randint(4, 81)}$ and keep the result for the next step." for i in range(8)]
    if long:
        steps *= 3
    body = "\n".join(steps)
    if rng.random() < 0.08:
        return body + f"\nSo the answer is {answer}."  # no box
    return body + f"\nTherefore the final answer is $\\boxed{{{answer}}}$."


class ScriptedGenerator:
    """Replays a step: Challenger format turns, task turns, then Reasoner answers. Token ids were
    made while building the workload; ``generate`` only hands the prepared completions back."""

    def __init__(self, tok, n_attempts: int, group: int, seed: int = 0):
        rng = random.Random(seed)
        self.tok, self.group, self.calls = tok, group, 0
        kinds = ["mcq", *spice_tasks.ANSWER_TYPES]
        self.plan = []  # per attempt: (format text, kind or None, task text, task spec or None)
        for i in range(n_attempts):
            if rng.random() < 0.12:
                self.plan.append((rng.choice(BROKEN_FORMATS), None, None, None))
                continue
            kind = kinds[i % len(kinds)]
            if rng.random() < 0.45:
                self.plan.append((FORMATS[kind], kind, rng.choice(BROKEN_TASKS[kind]), None))
                continue
            q, gold, right, wrong = task_spec(kind, rng.randint(3, 10_000))
            question = q.format(t=f"institute number {i}")
            if kind == "mcq":
                text = f'{question}", "multiple_choice_correct": {gold}}}'
            else:
                text = f'{question}", "answer": {gold}, "answer_type": "{kind.capitalize()}"}}'
            self.plan.append((FORMATS[kind], kind, text, (right, wrong)))
        enc = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731
        self.first = [self._completion(enc(p[0]), p[0], "eos") for p in self.plan]
        self.second = [self._completion(enc(p[2]), p[2], "eos") for p in self.plan if p[1] is not None]
        self.answers = []  # per valid task, in order: group completions
        for p in self.plan:
            if p[3] is None:
                continue
            right, wrong = p[3]
            row = []
            for j in range(group):
                ans = rng.choice(right) if rng.random() < 0.5 else rng.choice(wrong)
                text = reasoning(ans, rng, long=rng.random() < 0.1)
                row.append(self._completion(enc(text), text, "length" if rng.random() < 0.05 else "eos"))
            self.answers.append(row)

    @staticmethod
    def _completion(ids, text, finish):
        return Completion(prompt_ids=[], completion_ids=list(ids), logprobs=[-0.5] * len(ids), text=text,
                          finish_reason=finish, temperature=1.0)

    def generate(self, prompts, params):
        self.calls += 1
        if self.calls == 1:
            assert len(prompts) == len(self.first)
            return self.first
        if self.calls == 2:
            assert len(prompts) == len(self.second)
            return self.second
        assert len(prompts) == self.group * len(self.answers), (len(prompts), len(self.answers))
        return [c for row in self.answers for c in row]


# ---- the step ----------------------------------------------------------------------------------

def tokenizer():
    from transformers import AutoTokenizer

    if not TOKENIZER_CACHE.is_dir():
        from trainer.models import bundled_tokenizer

        bundled_tokenizer("qwen2.5-coder-0.5b-instruct").save_pretrained(TOKENIZER_CACHE)
    return AutoTokenizer.from_pretrained(TOKENIZER_CACHE)


def make_ctx(tok, docs_per_step: int, attempts: int, group: int, run_dir: Path):
    cfg = load_config({
        "method": "spice", "seed": 0, "model": {"name_or_path": "qwen2.5-coder-0.5b-instruct", "lora": {"r": 0}},
        "rollout": {"max_new_tokens": 512, "group_size": group, "temperature": 1.0},
        "train": {"steps": 1, "prompts_per_step": docs_per_step, "micro_batch_size": 8, "device": "cpu"},
        "corpus": {"path": "bundled:wikipedia"},
        "spice": {"challenger_attempts": attempts, "challenger_group_size": attempts, "max_challenger_attempts": attempts,
                  "max_document_tokens": 512, "format_max_new_tokens": 256},
    })
    policy = SimpleNamespace(tokenizer=tok, device=torch.device("cuda"))  # device: the GPU step's token budget
    return SimpleNamespace(config=cfg, policy=policy, sampling_params=lambda **kw: kw, generator=None), cfg


def one_step(ctx, cfg, docs, step: int, sink, gen):
    """run_spice's step body, generation replayed and the update's own passes left out."""
    sec = cfg.spice
    ctx.generator = gen
    reward_fn = spice_reward_fn(sec.challenger_reward, invalid=sec.invalid_penalty, tau=sec.gaussian_tau)
    advantage = get_advantage(sec.advantage)
    review, rng = ReviewState(), random.Random(step)
    draws = spice_tasks.draw_numbers(docs)
    by_doc, retries = spice.challenge_until_valid(ctx, docs, step, draws, review)
    attempts = [a for row in by_doc for a in row]
    spice.select(by_doc, sec, review, rng)
    spice_tasks.answer(ctx, [a for a in attempts if a.kept and a.valid])
    for a in attempts:
        a.reward = spice.challenger_reward(a, reward_fn) if a.kept or not a.valid else 0.0
    samples = spice.build_samples(by_doc, sec, advantage, rng)
    prepare_update(samples, cfg)
    for role, values in spice.step_metrics(attempts).items():
        sink.metrics(step, role, values)
    sink.samples(step, spice.records(step, [a for a in attempts if a.kept or a.valid or a.round == 0]))
    return attempts, samples


def prepare_update(samples, cfg):
    """The update's work before its first forward: plan and pad the micro-batches (on the CPU)."""
    t = cfg.train
    plan = update_mod.plan_micro_batches(samples, t.micro_batch_size, "auto", t.micro_batch_tokens, device_type="cuda")
    for group, shared in plan:
        update_mod.make_micro_batch(group, cfg.rollout.temperature, torch.device("cpu"), shared, packed=True)


SHOWN = [  # (label, module file fragment, function name)
    ("step total (no generation, no update passes)", "spice_step_cpu.py", "one_step"),
    ("challenge: both Challenger turns", "spice_tasks.py", "challenge"),
    ("  challenger_prompt (document + chat template)", "spice_tasks.py", "challenger_prompt"),
    ("  continue_chat (turn-two glue)", "spice_tasks.py", "continue_chat"),
    ("  parse_format_choice", "spice_tasks.py", "parse_format_choice"),
    ("  parse_task", "spice_tasks.py", "parse_task"),
    ("    copies_example", "spice_tasks.py", "copies_example"),
    ("select (keep_preserving_ratio, flags)", "spice.py", "select"),
    ("answer: Reasoner prompts + grading", "spice_tasks.py", "answer"),
    ("  chat (Reasoner prompt tokens)", "prompts.py", "chat"),
    ("  is_correct (before: one call per answer)", "spice_tasks.py", "is_correct"),
    ("  grade (after: the step's answers at once)", "spice_tasks.py", "grade"),
    ("    math_equal (before)", "verify.py", "math_equal"),
    ("    math_equal_many (after)", "verify.py", "math_equal_many"),
    ("      math-verify helper (sympy)", "verify.py", "equal"),
    ("challenger_reward", "spice.py", "challenger_reward"),
    ("build_samples (advantages)", "spice.py", "build_samples"),
    ("update prep (plan + pad micro-batches)", "spice_step_cpu.py", "prepare_update"),
    ("step_metrics", "spice.py", "step_metrics"),
    ("records", "spice.py", "records"),
    ("JsonlSink.samples (samples.jsonl)", "sink.py", "samples"),
    ("JsonlSink.metrics (metrics.jsonl)", "sink.py", "metrics"),
]


def table(stats: pstats.Stats, steps: int) -> list[tuple[str, int, float]]:
    rows = []
    for label, fragment, name in SHOWN:
        calls, secs = 0, 0.0
        for (file, _line, func), (cc, nc, tt, ct, callers) in stats.stats.items():
            if func == name and file.endswith(fragment):
                calls, secs = calls + nc, secs + ct
        rows.append((label, calls // steps, secs / steps))
    return rows


def grpo_scoring(prompts: int, group: int, steps: int) -> tuple[int, float]:
    """GRPO's reward of a step (GSM8K-like: plain-number golds; boxed plain numbers, fractions, units,
    unboxed answers), with ``score_answers`` where the code has it, else ``score_answer`` each."""
    from trainer import verify

    rng = random.Random(1)
    total, n = 0.0, 0
    for step in range(steps + 1):
        texts, golds = [], []
        for _ in range(prompts):
            gold = str(rng.randint(2, 5000))
            for _ in range(group):
                k = rng.random()
                ans = (gold if k < 0.4 else str(rng.randint(2, 5000)) if k < 0.6 else
                       f"\\frac{{{2 * int(gold)}}}{{2}}" if k < 0.75 else f"{gold} \\text{{ dollars}}" if k < 0.85 else
                       f"{gold} + {rng.randint(1, 9)}")
                texts.append(reasoning(ans, rng, long=rng.random() < 0.1))
                golds.append(gold)
        t0 = time.perf_counter()
        if hasattr(verify, "score_answers"):
            verify.score_answers(texts, golds, "math")
        else:
            [verify.score_answer(t, g, "math") for t, g in zip(texts, golds)]
        if step == 0:
            continue  # the first step starts math-verify's helper
        total += time.perf_counter() - t0
        n += len(texts)
    return n // steps, total / steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=32)
    ap.add_argument("--attempts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2, help="timed steps (the table shows per-step means)")
    ap.add_argument("--cold", action="store_true", help="no untimed warm-up step (math-verify's helper starts inside)")
    ap.add_argument("--top", type=int, default=0, help="also print cProfile's N costliest functions")
    ap.add_argument("--json", help="write the table here as JSON")
    args = ap.parse_args(argv)

    tok = tokenizer()
    rows = read_jsonl_corpus(corpus_path("bundled:wikipedia"))
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        ctx, cfg = make_ctx(tok, args.docs, args.attempts, args.group, Path(tmp))
        sink = JsonlSink(tmp)
        n = args.docs * args.attempts
        gens = [ScriptedGenerator(tok, n, args.group, seed=s) for s in range(args.steps + 1)]
        docs = [rng.sample(rows, args.docs) for _ in range(args.steps + 1)]
        if not args.cold:
            one_step(ctx, cfg, docs[-1], 0, sink, gens[-1])
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        for s in range(args.steps):
            attempts, samples = prof.runcall(one_step, ctx, cfg, docs[s], s + 1, sink, gens[s])
        wall = (time.perf_counter() - t0) / args.steps
        size = (Path(tmp) / "samples.jsonl").stat().st_size
    valid = sum(a.valid for a in attempts)
    answers = sum(len(a.answers) for a in attempts)
    print(f"# {args.docs} documents x {args.attempts} attempts = {len(attempts)} Challenger attempts, {valid} valid, "
          f"{answers} Reasoner answers, {len(samples)} samples; samples.jsonl {size / 1e6:.1f} MB over "
          f"{args.steps + (0 if args.cold else 1)} steps; wall {wall:.2f} s/step (profiled)")
    stats = pstats.Stats(prof)
    result = table(stats, args.steps)
    width = max(len(r[0]) for r in result)
    print(f"{'function':<{width}}  {'calls':>6}  {'seconds':>8}")
    for label, calls, secs in result:
        print(f"{label:<{width}}  {calls:>6}  {secs:>8.3f}")
    calls, secs = grpo_scoring(args.docs, args.group, args.steps)
    print(f"{'GRPO reward of a step (' + str(args.docs) + ' prompts x ' + str(args.group) + ')':<{width}}  "
          f"{calls:>6}  {secs:>8.3f}")
    result.append(("GRPO reward of a step", calls, secs))
    if args.top:
        stats.sort_stats("cumulative").print_stats(args.top)
    if args.json:
        Path(args.json).write_text(json.dumps({"wall_s": wall, "rows": result}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
