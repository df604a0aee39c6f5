"""SSP's held-out measure (issue 21, 4c): Solver accuracy on questions the BASE model proposes for answers
from documents the run never saw. Run from the repository root (CPU or GPU; no Postgres, no internet: BM25
in memory over JSONL files):

    python benchmarks/gpu/ssp_eval.py make-questions --model base:/tmp/models/q15 \\
        --config benchmarks/gpu/learn_ssp.yaml --n 200 --out .gpu_assets/ssp_heldout.jsonl
    python benchmarks/gpu/ssp_eval.py eval --run /tmp/runs/ssp --bench .gpu_assets/ssp_heldout.jsonl
    python benchmarks/gpu/ssp_eval.py make-cloze --n 300 --out .gpu_assets/ssp_cloze.jsonl    # no model needed
    python benchmarks/gpu/ssp_eval.py eval --run /tmp/runs/ssp --bench .gpu_assets/ssp_cloze.jsonl --name ssp-cloze
    python benchmarks/gpu/ssp_eval.py eval --run /tmp/runs/ssp --bench B.jsonl --model base:X --model RUN/checkpoints/step-000010

``make-questions``: the base model plays the Proposer with the recipe's own code
(``trainer.methods.ssp.draw_answers`` and ``propose_questions``: answers = titles / short named spans of
documents drawn from ``--answers-from`` (default .gpu_assets/wiki_heldout.jsonl, documents 3000-3999),
the Proposer prompt, the multi-turn search trajectory at the run's temperature and budgets, the rule
filter and the RAG check judged like the run, exact match then the frozen base). It keeps the valid
questions, one per answer, and writes them as a ``trainer.evaluate`` JSONL benchmark: id, question,
answer, document_id, plus how it was made. Rounds of ``--batch`` answers run until ``--n`` questions or
``--max-rounds`` (or ``--minutes``); a file that already holds questions is extended, not rewritten.

``eval``: each model (``base:<name>`` or a checkpoint folder; default: the run's base model and every
checkpoint in RUN/checkpoints) answers every question as the SSP Solver (the Search-R1 prompt,
``<search>`` over ``--search`` files: default the training corpus AND the held-out documents, so a held-out
answer can be found), greedily, with the run's ``ssp.max_turns``, ``ssp.top_k`` and ``rollout.max_new_tokens``.

Scoring: ``exact`` (SQuAD-normalized exact match), the first and deterministic half of the Solver's reward
(exact match, then the frozen-base judge). The judge half is left out of the headline on purpose: the
Solver is trained against that judge, and a 0.5B/1.5B judge says "Correct" to answers that are not, so a
judged score could rise by fooling the judge rather than by answering better. ``--judged`` also records the
reward's own rule (``trainer.methods.ssp.judged``: exact, then the frozen base) as ``<name>-judged``.
Results: ``append_eval(RUN, ...)`` with benchmark ``ssp-heldout`` (``--name``) and the checkpoint's step
(0 = base), 95% bootstrap interval; (step, benchmark) pairs already in RUN/evals.jsonl are skipped, so a
cut-off evaluation resumes. Sample outputs go to $OUT/ssp_eval_samples_step<N>.jsonl; a table is printed last.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from common import (HELDOUT, OUT, TRAIN_CORPUS, UsageError, add_eval_args, add_make_args, emit,  # noqa: E402
                    eval_inputs, evals_table, load, load_run_config, read_docs, run_cli, search_tool, targets,
                    trained_reserve)

from trainer.runfolder import append_eval, read_evals, write_eval_samples  # noqa: E402

METHODS = ("ssp",)


# ---- make-cloze --------------------------------------------------------------------------------

def cmd_make_cloze(args) -> None:
    """A held-out set that does not depend on the Proposer: ``trainer.evaluate.cloze_items`` over the held-out
    documents (a name or number of 1-3 words blanked in one of the document's sentences, the article's title
    given), answered by the Solver WITH search over both corpora. At 1.5B the base Proposer validated 15 questions
    of 1,536 answers in 5 minutes, most of them ill-posed (benchmarks/RESULTS.md), too few to measure a Solver by;
    this set measures the Solver's search-and-read skill on documents it never trained on, n = ``--n``."""
    from trainer.evaluate import cloze_items, write_jsonl

    docs = read_docs(args.docs)
    items = cloze_items(docs, args.n, seed=args.seed)
    if not items:
        raise UsageError(f"no cloze item could be made from {args.docs}")
    write_jsonl(items, args.out)
    emit("make_cloze", {"out": args.out, "items": len(items), "documents": len(docs), "seed": args.seed})


# ---- make-questions ----------------------------------------------------------------------------

def read_existing(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def cmd_make_questions(args) -> None:
    from trainer.judge import Judge, key_env, make_judge
    from trainer.methods.ssp import draw_answers, propose_questions
    from trainer.rollout import SamplingParams
    from trainer.tools.corpus import JsonlDocumentSource

    cfg = load_run_config(None, args.config, METHODS, args.set)
    sec = cfg.ssp
    out = Path(args.out)
    rows = read_existing(out)
    if len(rows) >= args.n:
        print(f"{out} already holds {len(rows)} questions (>= --n {args.n}); nothing to do")
        return
    documents = JsonlDocumentSource(read_docs(args.answers_from, "--answers-from"))
    spec = args.model or f"base:{cfg.model.name_or_path}"
    loaded = load(spec)
    tool, n_docs = search_tool(args.search or [TRAIN_CORPUS, HELDOUT], loaded.tokenizer, sec.top_k)
    judge = None
    if sec.judge == "frozen_base":  # the Proposer IS the base: it judges the RAG answers, as the run's frozen base
        judge = Judge.from_generator(loaded.generator, loaded.tokenizer, use_adapter=True,
                                     max_tokens={"equivalent": sec.judge_max_new_tokens})
    elif sec.judge == "endpoint":
        judge = make_judge(None, "endpoint", sec.judge_endpoint, sec.judge_model,
                           api_key_env=key_env(sec.judge_api_key), max_tokens={"equivalent": sec.judge_max_new_tokens})
    sampling = SamplingParams(temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                              max_new_tokens=cfg.rollout.max_new_tokens, logprobs=False)
    ctx = SimpleNamespace(config=SimpleNamespace(ssp=sec, rollout=cfg.rollout), documents=documents,
                          policy=SimpleNamespace(tokenizer=loaded.tokenizer), generator=loaded.generator,
                          sampling_params=lambda **kw: replace(sampling, **kw))
    print(f"make-questions: {spec} as Proposer, answers from {args.answers_from}, search over {n_docs} documents, "
          f"{args.batch} answers a round", flush=True)
    seen_answers = {r["answer"].strip().lower() for r in rows}
    seen_questions = {r["question"].strip().lower() for r in rows}
    totals = {"answers": 0, "rule_pass": 0, "rag_checked": 0, "rag_pass": 0, "valid": 0, "kept": 0,
              "truncated": 0, "searches": 0}
    reasons: dict[str, int] = {}
    rng = random.Random(args.seed + len(rows))
    t0 = time.perf_counter()
    for round_ in range(args.max_rounds):
        if len(rows) >= args.n:
            break
        if args.minutes is not None and time.perf_counter() - t0 > args.minutes * 60:
            print(f"make-questions: --minutes {args.minutes} spent after {round_} rounds", flush=True)
            break
        seeds = draw_answers(ctx, args.batch, rng, None)
        slots = propose_questions(ctx, tool, judge, seeds, rng, step=round_)
        for s in slots:
            totals["answers"] += 1
            totals["rule_pass"] += s.filter.ok
            totals["rag_checked"] += s.rag_ok is not None
            totals["rag_pass"] += bool(s.rag_ok)
            totals["valid"] += s.valid
            totals["truncated"] += bool(s.proposer.truncated)
            totals["searches"] += s.proposer.n_searches
            if not s.filter.ok:
                reasons[s.filter.reason] = reasons.get(s.filter.reason, 0) + 1
            key_a, key_q = s.answer.strip().lower(), (s.question or "").strip().lower()
            if not s.valid or key_a in seen_answers or key_q in seen_questions or len(rows) >= args.n:
                continue
            seen_answers.add(key_a)
            seen_questions.add(key_q)
            rows.append({"id": f"ssp-{len(rows):04d}", "question": s.question.strip(), "answer": s.answer,
                         "document_id": s.doc_id, "required_searches": s.n_searches,
                         "proposer_queries": list(s.proposer.queries), "rag_answer": s.rag_answer,
                         "proposer": spec})
            totals["kept"] += 1
        write_rows(out, rows)
        emit("make_questions_round", {"round": round_, "questions": len(rows), **totals,
                                      "seconds": round(time.perf_counter() - t0, 1)})
    n = max(totals["answers"], 1)
    emit("make_questions", {"out": str(out), "questions": len(rows), "answers_tried": totals["answers"],
                            "valid_rate": round(totals["valid"] / n, 3),
                            "rule_pass_rate": round(totals["rule_pass"] / n, 3),
                            "rag_pass_rate": round(totals["rag_pass"] / max(totals["rag_checked"], 1), 3),
                            "proposer_truncated_rate": round(totals["truncated"] / n, 3),
                            "proposer_searches_mean": round(totals["searches"] / n, 2),
                            "filtered": reasons, "seconds": round(time.perf_counter() - t0, 1)})
    if len(rows) < args.n:
        print(f"only {len(rows)} of {args.n} questions after {args.max_rounds} rounds; run again to add more "
              "(the file is extended)", flush=True)


def write_rows(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(path)


# ---- eval --------------------------------------------------------------------------------------

def cmd_eval(args) -> None:
    import torch

    from trainer.evaluate import default_batch_size, evaluate, frozen_judge
    from trainer.methods.ssp import judged
    from trainer.rollout import SamplingParams

    run, items, cfg = eval_inputs(args, METHODS)
    name = args.name
    sec = cfg.ssp
    max_new = args.max_new_tokens or cfg.rollout.max_new_tokens
    reserve = trained_reserve(run, cfg)  # the Solver keeps the answer reserve it trained with
    names = [name] + ([f"{name}-judged"] if args.judged else [])
    for step, spec in targets(run, args.model):
        done = {(r["step"], r["benchmark"]) for r in read_evals(run)}
        if all((step, n) in done for n in names):
            print(f"step {step} ({spec}): already recorded, skipped", flush=True)
            continue
        loaded = load(spec)
        tool, n_docs = search_tool(args.search or [TRAIN_CORPUS, HELDOUT], loaded.tokenizer, sec.top_k)
        result = evaluate(loaded.generator, loaded.tokenizer, items, "exact", search_tool=tool,
                          max_turns=sec.max_turns, batch_size=args.batch_size or default_batch_size(loaded),
                          sampling=SamplingParams(temperature=0.0, max_new_tokens=max_new, logprobs=False),
                          name=name, answer_reserve=reserve)
        samples = result.samples
        n = max(len(samples), 1)
        stats = {"answered_rate": round(sum(s["prediction"] is not None and "<answer>" in (s["output"] or "")
                                            for s in samples) / n, 3),
                 "searches_mean": round(sum(s.get("searches", 0) for s in samples) / n, 2),
                 "n_docs_searched": n_docs, "max_new_tokens": max_new, "max_turns": sec.max_turns,
                 "answer_reserve": reserve}
        rows = [{"step": step, "checkpoint": spec, "benchmark": name, "scoring": "exact", "n": result.n,
                 "score": result.score, "ci_low": result.ci_low, "ci_high": result.ci_high,
                 "seconds": round(result.seconds, 1), "correct": result.correct, **stats}]
        if args.judged:
            from trainer.evaluate import bootstrap_ci

            t0 = time.perf_counter()
            judge = frozen_judge(loaded, max_tokens={"equivalent": sec.judge_max_new_tokens})
            ok = judged(judge, [(it.question, s["prediction"], it.answer if isinstance(it.answer, str)
                                 else it.answer[0]) for it, s in zip(items, samples)])
            for s, v in zip(samples, ok):
                s["judged"] = v
            values = [float(v) for v in ok]
            lo, hi = bootstrap_ci(values)
            rows.append({**rows[0], "benchmark": f"{name}-judged", "scoring": "judge",
                         "score": sum(values) / len(values), "ci_low": lo, "ci_high": hi, "correct": sum(ok),
                         "seconds": round(result.seconds + time.perf_counter() - t0, 1)})
        for row in rows:
            if (step, row["benchmark"]) not in done:
                emit("eval", append_eval(run, row))
        with (OUT / f"ssp_eval_samples_step{step}.jsonl").open("w") as f:
            for s in samples[: args.keep_samples]:
                f.write(json.dumps(s, default=str) + "\n")
        if (step, name) not in done:  # the samples of the line just recorded (a --judged rerun keeps the old pair)
            write_eval_samples(run, name, step, samples)  # every item: the web's paired difference vs the base
        del loaded
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    evals_table(run, names)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-questions", help="the base model proposes held-out questions")
    m.add_argument("--config", default="benchmarks/gpu/learn_ssp.yaml", help="the SSP run's YAML (budgets, filter)")
    m.add_argument("--set", action="append", default=[], help="config override key=value (as trainer run)")
    m.add_argument("--model", help="the Proposer (default: base:<the config's model.name_or_path>)")
    m.add_argument("--answers-from", default=HELDOUT, help="JSONL documents the answers are drawn from")
    m.add_argument("--search", action="append", help=f"JSONL corpora searched (default {TRAIN_CORPUS} and {HELDOUT})")
    m.add_argument("--n", type=int, default=200, help="questions wanted")
    m.add_argument("--batch", type=int, default=64, help="answers proposed together in a round")
    m.add_argument("--max-rounds", type=int, default=20)
    m.add_argument("--minutes", type=float, help="start no round after this many minutes (a time budget)")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--out", default=".gpu_assets/ssp_heldout.jsonl")
    c = sub.add_parser("make-cloze", help="held-out cloze items (no model): a Proposer-independent Solver set")
    add_make_args(c, 300, out=".gpu_assets/ssp_cloze.jsonl")
    e = sub.add_parser("eval", help="Solver accuracy with search, recorded in RUN/evals.jsonl")
    add_eval_args(e, "questions")
    e.add_argument("--bench", default=".gpu_assets/ssp_heldout.jsonl", help="the make-questions file")
    e.add_argument("--name", default="ssp-heldout", help="the benchmark name recorded")
    e.add_argument("--judged", action="store_true", help="also record <name>-judged: exact, then the frozen base")
    e.add_argument("--keep-samples", type=int, default=50, help="samples per model written to $OUT")
    args = parser.parse_args(argv)
    if args.cmd == "make-questions" and (args.n < 1 or args.batch < 1 or args.max_rounds < 1):
        parser.error("--n, --batch and --max-rounds must be >= 1")
    return run_cli({"make-questions": cmd_make_questions, "make-cloze": cmd_make_cloze, "eval": cmd_eval}[args.cmd],
                   args)


if __name__ == "__main__":
    sys.exit(main())
