"""Held-out measures of SCOPE, SCORE and pi-Play (issue 31 item 3), each taken from its paper's evaluation and
computed with the product's evaluator (``trainer.evaluate``: scoring, bootstrap intervals) and judge
(``trainer.judge``: the frozen base grading against a rubric). Run from the repository root, CPU or GPU, no
Postgres, no internet (BM25 in memory over JSONL files):

    python benchmarks/gpu/method_eval.py make-scope --out .gpu_assets/scope_open.jsonl        # no model needed
    python benchmarks/gpu/method_eval.py make-score --out .gpu_assets/score_reports.jsonl
    python benchmarks/gpu/method_eval.py make-multihop --out .gpu_assets/piplay_multihop.jsonl
    python benchmarks/gpu/method_eval.py make-cloze --out .gpu_assets/method_cloze.jsonl
    python benchmarks/gpu/method_eval.py eval --run /tmp/runs/sc --bench .gpu_assets/scope_open.jsonl --name scope-open
    python benchmarks/gpu/method_eval.py regrade --run /tmp/runs/so --bench .gpu_assets/score_reports.jsonl \
        --name score-reports                                   # the recorded answers graded again: score-reports-regraded

Item sets, all built WITHOUT a model from ``--docs`` (default .gpu_assets/wiki_heldout.jsonl: documents 3000-3999,
never trained on; the runs train on wiki.jsonl, 0-2999), seeded: the same seed and documents give the same file,
byte for byte, so a run and its control (or two runs making the file at once) are measured on the same items.

- ``make-scope`` (SCOPE, the paper's open-ended evaluation: long-form questions graded by a judge against per-task
  rubrics): one task per document, of SCOPE's task types that a document can ground (long-form QA and
  summarisation; planning and writing tasks have no document-checkable content), the title named; 3 rubrics, each a
  fact the document states ("The response states, in substance, that ..."), plus one that the response is about
  that subject. Ours: the paper's rubrics are written by its judge; these are taken from the document, so they do
  not depend on the base model and are the same for every run.
- ``make-score`` (SCORE, the paper's report evaluation with a fixed evaluator and a fixed rubric): a research query
  per document (SCORE's own templated query, ``trainer.methods.score.title_query``) and a fixed rubric of five
  criteria: factuality x2 (facts of the document), comprehensiveness, coherence, citation.
- ``make-multihop`` (pi-Play, the paper's multi-hop QA with search): 2-hop bridge questions from pairs of held-out
  documents (A, B) where A's text names B's title: a sentence of A with B's title replaced by X identifies X, and the
  answer is a span (a name or number of 1-3 words) blanked in a sentence of B about X. Scored by exact match (the
  Student's reward). Caveat: BM25 on B's sentence can find B without the first hop.
- ``make-cloze`` (SCOPE's cloze set with search, as ssp_eval.py's): ``trainer.evaluate.cloze_items``.

``eval``: the base (step 0) and the run's checkpoint(s) (default: every checkpoint of RUN/checkpoints; with
checkpoint.every=0 the last) answer every item greedily in the run's answering role, with the run's own prompt
(SCOPE's Solver, SCORE's report writer with the rubric's dimensions named, pi-Play's Student), search over
``--search`` (default the training corpus AND the held-out documents, so held-out facts can be found), the run's
turn and tool budgets and ``rollout.max_new_tokens``. A checkpoint of separate policies loads its answering role's
adapter (``meta.json`` answer_role). Rubric items: the final ``<answer>`` (else the trajectory without the
retrieved passages) is graded on each criterion separately by the frozen base (``trainer.judge.Judge.grade_batch``,
0/1 read by ``trainer.judge.parse_score``, temperature 0 so the grader is fixed), the item's score the mean (SCOPE's mean rubric score); exact
items: ``trainer.evaluate.score_batch`` (SQuAD-normalized exact match). Results: RUN/evals.jsonl (``append_eval``,
the 95% bootstrap interval) and RUN/eval_samples/<name>-step<N>.jsonl (every item: what ``benchmarks/paired_runs.py``
and ``manage.py import_run`` read); (step, benchmark) pairs already recorded are skipped, so a cut-off evaluation
resumes; a table is printed last.

``regrade``: the answers an ``eval`` recorded (RUN/eval_samples/<--name>-step<N>.jsonl) graded again by the grader,
with no generation, recorded as the benchmark ``--as`` (default <name>-regraded) for every step: after a change to
the grader (the score parser once read 999 of 1,000 of the 1.5B grader's replies as format failures).
"""
from __future__ import annotations

import argparse
import random
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (HELDOUT, TRAIN_CORPUS, UsageError, add_eval_args, add_make_args, base_spec,  # noqa: E402
                    emit, eval_inputs, evals_table, load, read_docs, run_cli, search_tool, targets, trained_reserve)

from trainer.runfolder import append_eval, read_evals, write_eval_samples  # noqa: E402

METHODS = ("scope", "score", "piplay")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_INFO = re.compile(r"<information>.*?</information>", re.DOTALL)
SCOPE_TASKS = {  # SCOPE's task types a document can ground (scope_prompts.TASK_TYPES: long_form_qa, summarisation)
    "long_form_qa": "What is {title}, and what are the most important facts about it? Give a detailed, "
                    "well-organised answer.",
    "summarisation": "Write a concise summary of what is known about {title}: what it is, and its notable details "
                     "(people, places, dates, numbers).",
}
SCORE_DIMENSIONS = (("factuality", 0.4), ("comprehensiveness", 0.2), ("coherence", 0.2), ("citation", 0.2))


def facts(text: str, min_words: int = 6, max_words: int = 45) -> list[str]:
    """The document's sentences that can stand as a checkable fact (6-45 words), in order, each on one line (a
    rubric holds one criterion a line)."""
    return [" ".join(s.split()) for s in _SENTENCE.split(text or "") if min_words <= len(s.split()) <= max_words]


def fact_rubric(sentence: str) -> str:
    return f"The response states, in substance, that: {sentence}"


def shuffled(docs, seed: int) -> list:
    docs = sorted(docs, key=lambda d: str(d.id))  # the file's order does not matter, only its documents
    random.Random(seed).shuffle(docs)
    return docs


def scope_items(docs, n: int, seed: int = 0) -> list:
    """Open-ended SCOPE tasks with document-grounded rubrics (module docstring); at most one per document."""
    from trainer.evaluate import Item

    rng, items, kinds = random.Random(seed), [], sorted(SCOPE_TASKS)
    for doc in shuffled(docs, seed):
        if len(items) >= n:
            break
        found = facts(doc.text)
        if len(found) < 3 or not doc.title:
            continue
        chosen = [found[0]] + rng.sample(found[1:], 2)  # the defining first sentence and two others
        kind = kinds[len(items) % len(kinds)]
        criteria = [fact_rubric(s) for s in chosen] + [
            f"The response is about {doc.title} specifically and does not describe a different subject."]
        items.append(Item(id=f"scope-{doc.id}", question=SCOPE_TASKS[kind].format(title=doc.title),
                          answer=doc.title, rubric="\n".join(criteria), scoring="judge",
                          meta={"document_id": str(doc.id), "task_type": kind, "criteria": criteria}))
    return items


def score_items(docs, n: int, seed: int = 0) -> list:
    """SCORE research queries with one fixed rubric of five criteria (module docstring)."""
    from trainer.evaluate import Item
    from trainer.methods.score import title_query

    rng, items = random.Random(seed), []
    for doc in shuffled(docs, seed):
        if len(items) >= n:
            break
        found = facts(doc.text)
        if len(found) < 2 or not doc.title:
            continue
        chosen = [found[0], found[1 + rng.randrange(len(found) - 1)]]
        criteria = [f"Factuality: the report states, consistently with the source, that: {s}" for s in chosen] + [
            f"Comprehensiveness: the report covers what {doc.title} is, its background and key facts, and why it "
            "matters, as the query asks.",
            "Coherence: the report is organised and readable, without contradictions, repetition or unfinished "
            "sentences.",
            "Citation: the report attributes its key claims to sources (it names the article or passage they "
            "come from)."]
        items.append(Item(id=f"score-{doc.id}", question=title_query(doc.title), answer=doc.title,
                          rubric="\n".join(criteria), scoring="judge",
                          meta={"document_id": str(doc.id), "criteria": criteria}))
    return items


def multihop_items(docs, n: int, seed: int = 0) -> list:
    """2-hop bridge questions over pairs of documents of ``docs`` (module docstring); at most one per bridge
    document A and one per target document B."""
    from trainer.evaluate import Item, _candidates

    rng = random.Random(seed)
    by_title = {d.title: d for d in sorted(docs, key=lambda d: str(d.id)) if d.title and len(d.title) >= 5}
    patterns = {t: re.compile(r"\b" + re.escape(t) + r"\b") for t in by_title}
    items, used_b = [], set()
    for a in shuffled(docs, seed):
        if len(items) >= n:
            break
        a_facts = facts(a.text)
        options = []
        for title, b in by_title.items():
            if b.id == a.id or b.id in used_b or title.lower() in (a.title or "").lower():
                continue
            bridge = [s for s in a_facts if patterns[title].search(s)]
            if not bridge:
                continue
            for s in facts(b.text):
                for span in _candidates(s, title):
                    if span.lower() not in bridge[0].lower():
                        options.append((b, title, bridge[0], s, span))
        if not options:
            continue
        b, title, bridge, sentence, span = options[rng.randrange(len(options))]
        used_b.add(b.id)
        a_line = patterns[title].sub("X", bridge)
        b_line = patterns[title].sub("X", sentence).replace(span, "____", 1)
        question = (f'X is named in this sentence of the encyclopedia article about {a.title}: "{a_line}" '
                    f'Fill in the blank (____), 1 to 3 words, in this sentence of the article about X: "{b_line}"')
        items.append(Item(id=f"hop2-{a.id}-{b.id}", question=question, answer=span, scoring="exact",
                          meta={"document_id": str(b.id), "bridge_document_id": str(a.id), "bridge_title": title,
                                "hops": 2, "source": sentence}))
    return items


def cmd_make(args) -> None:
    from trainer.evaluate import cloze_items, write_jsonl

    docs = read_docs(args.docs)
    build = {"make-scope": scope_items, "make-score": score_items, "make-multihop": multihop_items,
             "make-cloze": cloze_items}[args.cmd]
    items = build(docs, args.n, seed=args.seed)
    if not items:
        raise UsageError(f"no item could be made from {args.docs}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{time.time_ns()}.tmp")  # two jobs may write the same file at once
    write_jsonl(items, tmp)
    tmp.replace(out)
    emit(args.cmd.replace("-", "_"), {"out": str(out), "items": len(items), "documents": len(docs), "seed": args.seed})


# ---- eval --------------------------------------------------------------------------------------

def answering(cfg):
    """(prompt(item) -> (system, user), max_turns, top_k, max_tool_tokens) of the run's answering role."""
    sec = getattr(cfg, cfg.method)
    if cfg.method == "scope":
        from trainer.methods.scope_prompts import solver_prompt

        searches = max(sec.max_turns - 1, 1)  # as ScopeRecipe's Solver rollouts
        return (lambda it: (None, solver_prompt(it.question, searches))), sec.max_turns, sec.top_k, sec.max_tool_tokens
    if cfg.method == "score":
        from trainer.methods.score_prompts import SOLVER_SYSTEM

        judged_on = "Your report will be judged on: " + ", ".join(f"{d} (weight {w:.2f})" for d, w in SCORE_DIMENSIONS)
        return ((lambda it: (SOLVER_SYSTEM, f"{it.question}\n\n{judged_on}" if it.rubric else it.question)),
                sec.max_tool_calls, sec.top_k, sec.max_tool_tokens)
    from trainer.methods.piplay_parts import student_prompt

    return (lambda it: (None, student_prompt(it.question))), sec.max_turns, sec.top_k, sec.max_tool_tokens


def response_of(traj) -> str:
    """What the grader reads: the final <answer>, else the model's own text (retrieved passages removed)."""
    if traj.final and traj.final.strip():
        return traj.final.strip()
    return _INFO.sub("", traj.text or "").strip()


def grounded(sample: dict) -> float | None:
    """A recorded report's grounded share (trainer.methods.score.report_grounded, as SCORE's runs log it); None for
    an item without an answer."""
    from trainer.methods.score import report_grounded

    if not sample.get("answered"):
        return None
    if not isinstance(sample.get("turns"), list):
        raise UsageError(f"item {sample.get('id')!r} has no list of turns: not a recording of `eval` on report items")
    return report_grounded(sample.get("prediction"), sample["turns"])


def grade_criteria(judge, answers: list[tuple[str, str, str]], batch_size: int, progress: str = "") -> list[list[int]]:
    """(question, response, rubric of criteria one per line) per item -> each item's 0/1 grades, a criterion a
    grade, asked in chunks of ``batch_size`` conversations: one call of 4-5 x batch_size rows would hold a static
    KV cache beside a co-tenant run's training. ``progress``: a label to print after each chunk."""
    flat = [(k, q, r, c) for k, (q, r, rubric) in enumerate(answers) for c in rubric.split("\n")]
    got, t0 = [], time.perf_counter()
    for c0 in range(0, len(flat), batch_size):
        got += judge.grade_batch([(q, r, c) for _, q, r, c in flat[c0:c0 + batch_size]])
        if progress:
            print(f"  {progress}: {len(got)}/{len(flat)} grades, {time.perf_counter() - t0:.0f} s", flush=True)
    grades: list[list[int]] = [[] for _ in answers]
    for (k, *_), g in zip(flat, got):
        grades[k].append(int(g))
    return grades


def measure(loaded, items, cfg, sampling, tool, batch_size: int, judge, reserve: int | None = 0
            ) -> tuple[list[dict], float]:
    from trainer.evaluate import extract_prediction, question_text, score_batch
    from trainer.prompts import chat
    from trainer.rollout import multi_turn_rollout

    prompt, max_turns, _, _ = answering(cfg)
    samples, t0 = [], time.perf_counter()
    for start in range(0, len(items), batch_size):
        batch = items[start:start + batch_size]
        trajs = multi_turn_rollout(loaded.generator, loaded.tokenizer, [chat(loaded.tokenizer, *prompt(it))
                                                                        for it in batch],
                                   sampling, tool, max_turns=max_turns, answer_reserve=reserve)
        rubric = [i for i, it in enumerate(batch) if it.rubric]
        plain = [i for i, it in enumerate(batch) if not it.rubric]
        scores, preds, grades = [0.0] * len(batch), [None] * len(batch), [None] * len(batch)
        if rubric:
            graded = grade_criteria(judge, [(question_text(batch[i]), response_of(trajs[i]), batch[i].rubric)
                                            for i in rubric], batch_size)
            for i, g in zip(rubric, graded):
                grades[i], scores[i], preds[i] = g, sum(g) / len(g), response_of(trajs[i])
        if plain:
            sub = [batch[i] for i in plain]
            p = [extract_prediction(trajs[i].text, "exact", trajs[i].final) for i in plain]
            for i, pred, s in zip(plain, p, score_batch(sub, p, [trajs[i].text for i in plain], "exact")):
                scores[i], preds[i] = s, pred
        for k, (it, t) in enumerate(zip(batch, trajs)):
            samples.append({"index": start + k, "id": it.id, "question": question_text(it), "gold": it.answer,
                            "prediction": preds[k], "output": t.text, "score": scores[k], "correct": scores[k] >= 1.0,
                            "scoring": "judge" if it.rubric else "exact", "grades": grades[k],
                            "searches": t.n_searches, "turns": t.turns, "truncated": bool(getattr(t, "truncated", 0)),
                            "answered": bool(t.final and t.final.strip()),
                            **({"document_id": it.meta["document_id"]} if "document_id" in it.meta else {})})
            if it.rubric:
                samples[-1]["grounded"] = grounded(samples[-1])
        print(f"  {len(samples)}/{len(items)} items, {time.perf_counter() - t0:.0f} s", flush=True)
    return samples, time.perf_counter() - t0


def cmd_eval(args) -> None:
    import torch

    from trainer.evaluate import bootstrap_ci, default_batch_size, frozen_judge
    from trainer.rollout import SamplingParams

    run, items, cfg = eval_inputs(args, METHODS)
    _, max_turns, top_k, tool_tokens = answering(cfg)
    max_new = args.max_new_tokens or cfg.rollout.max_new_tokens
    sampling = SamplingParams(temperature=0.0, max_new_tokens=max_new, logprobs=False)
    rubric_items = sum(bool(it.rubric) for it in items)
    reserve = trained_reserve(run, cfg)  # the answering role keeps the answer reserve it trained with
    for step, spec in targets(run, args.model):
        if (step, args.name) in {(r["step"], r["benchmark"]) for r in read_evals(run)}:
            print(f"step {step} ({spec}): already recorded, skipped", flush=True)
            continue
        loaded = load(spec)
        tool, n_docs = search_tool(args.search or [TRAIN_CORPUS, HELDOUT], loaded.tokenizer, top_k)
        tool.max_tokens = tool_tokens  # the run's tool budget (ssp_eval's tool keeps SSP's default)
        judge = None
        if rubric_items:  # the fixed grader: the frozen base, greedy
            judge = frozen_judge(loaded, max_tokens={"grade": args.judge_max_new_tokens},
                                 temperature={"grade": 0.0})
        print(f"step {step}: {spec} on {len(items)} items of {args.bench}, search over {n_docs} documents",
              flush=True)
        samples, seconds = measure(loaded, items, cfg, sampling, tool,
                                   args.batch_size or default_batch_size(loaded), judge, reserve)
        values = [s["score"] for s in samples]
        lo, hi = bootstrap_ci(values)
        n = max(len(samples), 1)
        row = {"step": step, "checkpoint": spec, "benchmark": args.name,
               "scoring": "judge" if rubric_items else "exact", "n": len(samples), "score": sum(values) / n,
               "ci_low": lo, "ci_high": hi, "seconds": round(seconds, 1),
               "correct": sum(s["correct"] for s in samples),
               "answered_rate": round(sum(s["answered"] for s in samples) / n, 3),
               "truncated_rate": round(sum(s["truncated"] for s in samples) / n, 3),
               "searches_mean": round(sum(s["searches"] for s in samples) / n, 2),
               "max_new_tokens": max_new, "max_turns": max_turns, "n_docs_searched": n_docs,
               "answer_reserve": reserve}
        shares = [s["grounded"] for s in samples if s.get("grounded") is not None]
        if shares:  # rubric items: the answered reports' mean grounded share
            row["grounded_share"] = round(sum(shares) / len(shares), 3)
        if judge is not None:
            row["judge_format_failures"] = judge.stats["grade_format_failures"]
            row["judge_trailing_text"] = judge.stats["grade_trailing_text"]  # read, though text followed the score
            row["judge_truncated"] = judge.stats["truncated"]
        emit("eval", append_eval(run, row))
        write_eval_samples(run, args.name, step, samples)
        del loaded, judge
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    evals_table(run, [args.name])


def cmd_regrade(args) -> None:
    """Grade the recorded answers of RUN/eval_samples/<--name>-step*.jsonl again, criterion by criterion, with a fixed
    grader (no generation): after a change to the grader. Recorded as the benchmark --as, step by step, beside the
    original rows; a (step, --as) pair already recorded is skipped."""
    from trainer.evaluate import BenchmarkError, bootstrap_ci, frozen_judge, read_jsonl
    from trainer.runfolder import BENCHMARK_NAME, read_eval_samples

    run, new = Path(args.run), args.as_ or f"{args.name}-regraded"
    if not BENCHMARK_NAME.fullmatch(new):
        raise UsageError(f"--as {new!r} must be lowercase letters, digits, - and _")
    if not run.is_dir():
        raise UsageError(f"run folder {run} does not exist")
    try:
        items = {it.id: it for it in read_jsonl(args.bench)[: args.limit or None] if it.rubric}
    except BenchmarkError as exc:
        raise UsageError(str(exc)) from None
    files = sorted((run / "eval_samples").glob(f"{args.name}-step*.jsonl"))
    if not files:
        raise UsageError(f"{run}/eval_samples has no {args.name}-step*.jsonl: what `eval --name {args.name}` writes")
    spec = args.judge or base_spec(run)
    judge = frozen_judge(load(spec), max_tokens={"grade": args.judge_max_new_tokens}, temperature={"grade": 0.0})
    rows = {(r["step"], r["benchmark"]): r for r in read_evals(run)}
    for f in files:
        step = int(f.stem.rsplit("-step", 1)[1])
        samples = [s for s in read_eval_samples(f) if s["id"] in items]
        if not samples:
            raise UsageError(f"no sample of {f.name} is an item of {args.bench} (another benchmark file?)")
        if (step, new) in rows:
            if rows[(step, new)]["n"] != len(samples):
                raise UsageError(f"step {step}: {new} is recorded for {rows[(step, new)]['n']} items, this would "
                                 f"grade {len(samples)}; give another name with --as")
            print(f"step {step}: {new} already recorded, skipped", flush=True)
            continue
        before, t0 = dict(judge.stats), time.perf_counter()
        graded = grade_criteria(judge, [(s["question"], s["prediction"] or "", items[s["id"]].rubric) for s in samples],
                                args.batch_size, progress=f"step {step}")
        out = [{**s, "grades": g, "score": sum(g) / len(g), "correct": sum(g) == len(g)} for s, g in zip(samples, graded)]
        values = [s["score"] for s in out]
        lo, hi = bootstrap_ci(values)
        orig = rows.get((step, args.name), {})
        row = {"step": step, "checkpoint": orig.get("checkpoint", f.stem), "benchmark": new, "scoring": "judge",
               "n": len(out), "score": sum(values) / len(out), "ci_low": lo, "ci_high": hi,
               "seconds": round(time.perf_counter() - t0, 1), "correct": sum(s["correct"] for s in out),
               "regraded_from": args.name, "judge": spec,
               **{k: orig[k] for k in ("answered_rate", "truncated_rate", "searches_mean") if k in orig},
               "judge_format_failures": judge.stats["grade_format_failures"] - before["grade_format_failures"],
               "judge_trailing_text": judge.stats["grade_trailing_text"] - before["grade_trailing_text"]}
        write_eval_samples(run, new, step, out)  # the samples first: a row is never recorded without them
        emit("regrade", append_eval(run, row))
    evals_table(run, [args.name, new])


def cmd_grounding(args) -> None:
    """The grounded share of the answered reports an evaluation recorded (RUN/eval_samples/<--name>-step<N>.jsonl),
    step by step, with a bootstrap interval over the answered items, and each later step's paired difference from
    step 0 over the items both answered. Reads files only: no model, no GPU."""
    from trainer.evaluate import bootstrap_ci, paired_difference
    from trainer.runfolder import RunFolderError, read_eval_samples

    run = Path(args.run)
    pattern = re.compile(rf"{re.escape(args.name)}-step([0-9]+)\.jsonl")
    files = {int(m.group(1)): f for f in (run / "eval_samples").glob("*.jsonl") if (m := pattern.fullmatch(f.name))}
    if not files:
        raise UsageError(f"{run}/eval_samples has no {args.name}-step<N>.jsonl: what `eval --name {args.name}` writes")
    per_step = {}
    for step in sorted(files):
        try:
            per_step[step] = {s["id"]: grounded(s) for s in read_eval_samples(files[step])}
        except RunFolderError as exc:
            raise UsageError(str(exc)) from None
    base = per_step.get(0, {})
    print(f"{'step':>5} {'items':>6} {'answered':>9} {'grounded share':>24}" + ("  step - step 0 (both answered)"
                                                                               if base else ""))
    for step, shares in per_step.items():
        got = [g for g in shares.values() if g is not None]
        lo, hi = bootstrap_ci(got) if got else (None, None)
        line = (f"{step:>5} {len(shares):>6} {len(got):>9} " + (f"{sum(got) / len(got):>8.3f} [{lo:.3f}, {hi:.3f}]"
                                                                if got else f"{'-':>24}"))
        d = paired_difference({k: g for k, g in base.items() if g is not None},
                              {k: g for k, g in shares.items() if g is not None}) if step else None
        paired = {}
        if d:
            line += f"  {d['diff']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] on {d['n']}"
            paired = {"vs_step0": round(d["diff"], 4), "vs_step0_low": d["low"], "vs_step0_high": d["high"],
                      "vs_step0_n": d["n"]}
        print(line)
        emit("grounding", {"run": run.name, "benchmark": args.name, "step": step, "items": len(shares),
                           "answered": len(got), "grounded_share": round(sum(got) / len(got), 4) if got else None,
                           "ci_low": lo, "ci_high": hi, **paired})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name, n, help_ in (("make-scope", 100, "SCOPE: open-ended tasks with document-grounded rubrics"),
                           ("make-score", 100, "SCORE: research queries with a fixed rubric"),
                           ("make-multihop", 200, "pi-Play: 2-hop bridge questions (exact answers)"),
                           ("make-cloze", 300, "cloze items (trainer.evaluate.cloze_items), answered with search")):
        add_make_args(sub.add_parser(name, help=help_), n)
    e = sub.add_parser("eval", help="the run's answering role on held-out items, recorded in RUN/evals.jsonl")
    add_eval_args(e, "items")
    e.add_argument("--bench", required=True, help="a make-* file")
    e.add_argument("--name", required=True, help="the benchmark name recorded (e.g. scope-open)")
    e.add_argument("--judge-max-new-tokens", type=int, default=512, help="the grader's tokens per criterion")
    g = sub.add_parser("regrade", help="grade the recorded answers of an evaluation again (no generation), as a new "
                       "benchmark name: after a change to the grader")
    g.add_argument("--run", required=True, help="the run folder")
    g.add_argument("--bench", required=True, help="the make-* file the evaluation used (its criteria)")
    g.add_argument("--name", required=True, help="the benchmark recorded (e.g. score-reports)")
    g.add_argument("--as", dest="as_", help="the benchmark name of the new grades (default NAME-regraded)")
    g.add_argument("--judge", help="the grader: base:<name> or a model folder (default: the run's base model)")
    g.add_argument("--limit", type=int, help="the first N items of --bench only")
    g.add_argument("--batch-size", type=int, default=16, help="grades per generation call")
    g.add_argument("--judge-max-new-tokens", type=int, default=512, help="the grader's tokens per criterion")
    gr = sub.add_parser("grounding", help="the grounded share of an evaluation's recorded reports (no model)")
    gr.add_argument("--run", required=True, help="the run folder")
    gr.add_argument("--name", required=True, help="the benchmark recorded (e.g. score-reports)")
    args = parser.parse_args(argv)
    if args.cmd.startswith("make-") and args.n < 1:
        parser.error("--n must be >= 1")
    if args.cmd == "regrade" and (args.batch_size < 1 or (args.limit is not None and args.limit < 1)):
        parser.error("--batch-size and --limit must be >= 1")
    return run_cli({"eval": cmd_eval, "regrade": cmd_regrade, "grounding": cmd_grounding}.get(args.cmd, cmd_make), args)


if __name__ == "__main__":
    sys.exit(main())
