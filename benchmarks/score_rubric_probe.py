"""Does SCORE's evaluator write a rubric the harness accepts as written, and does it search and score? (issue 31)

The evaluator's rubric tokens get SCORE's REINFORCE update. When the model's rubric breaks the harness
(a dimension without a weight, too many dimensions, one outside the pool), the recipe repairs it and
reinforces the repaired text instead (``Score.executed``): tokens the model did not sample, whose
log-probabilities can be far below the sampled ones. On Qwen2.5-Coder-1.5B-Instruct on an H200
(examples/runs/score-wiki-qwen15) 13 of 14 steps were repaired, and the evaluator's one-sample update
reached a KL of 120 to the reference.

This probe asks the recipe's own rubric prompt (``rubric_messages`` under the starting harness of a
config's ``score`` section, the DimensionScheduler's step-one constraints) N times with a real model at
the evaluator's temperature, and reports how often ``constrain_rubric`` takes the reply as written,
and the problems it repaired. Queries: ``title_query`` of consecutive documents, eight a prompt, as the
recipe shows eight.

``--part evaluation`` probes the evaluator's second prompt instead: ``evaluation_messages`` with a fixed
rubric (the mandatory dimension and three from the pool) over N reports, rolled out as the recipe does
(``multi_turn_rollout`` with the search tool over the same documents, the section's per-turn and trajectory
budgets, final tag ``scores``), and reports searches per evaluation, the share with at least one search,
well-formed scores (every dimension read), replies cut by the budget, and tokens. The reports are the
documents' own summaries with a "Conclusion:" paragraph, a stand-in for a Solver's report: the probe measures
the evaluator's format and search, not its judgement.

    .venv/bin/python benchmarks/score_rubric_probe.py --model qwen2.5-coder-1.5b-instruct --n 32
    .venv/bin/python benchmarks/score_rubric_probe.py --part evaluation --n 16
"""
from __future__ import annotations

import argparse
import collections
import json
import random
import re
import time
from pathlib import Path

import torch

from trainer.config import load_config
from trainer.evaluate import load_model
from trainer.methods import harness as mh
from trainer.methods.dimension_scheduler import DimensionScheduler
from trainer.methods.score import title_query
from trainer.methods.score_prompts import (
    constrain_rubric, evaluation_messages, parse_rubric, parse_scores, rubric_messages)
from trainer.prompts import chat
from trainer.rollout import SamplingParams
from trainer.rollout.multi_turn import multi_turn_rollout
from trainer.tools import InMemoryRetriever
from trainer.tools.search import SearchTool

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "examples" / "data" / "wiki_small.jsonl"


def probe(loaded, cfg, n: int, seed: int, batch: int) -> dict:
    sec = cfg.score
    pool = [d.lower() for d in sec.dimension_pool]
    harness = mh.starting_harness(sec, pool)
    must = harness["dimension_constraints"]["must_include"]
    step_harness, step_pool, _ = DimensionScheduler(pool).constrain(harness, pool, must)
    titles = [json.loads(line)["title"] for line in DOCS.read_text().splitlines() if line.strip()]
    prompts, rng = [], random.Random(seed)
    for i in range(n):
        queries = [title_query(t) for t in rng.sample(titles, 8)]
        msgs = rubric_messages(step_harness, step_pool, queries)
        prompts.append(chat(loaded.tokenizer, msgs[0]["content"], msgs[1]["content"]))
    params = SamplingParams(temperature=sec.evaluator_temperature, top_p=1.0,
                            max_new_tokens=sec.evaluator_max_new_tokens)
    loaded.generator.rng = torch.Generator().manual_seed(seed)
    t0, replies = time.time(), []
    for i in range(0, n, batch):
        replies += [c.text for c in loaded.generator.generate(prompts[i:i + batch], params)]
    problems, followed, rows = collections.Counter(), 0, []
    for text in replies:
        rubric = constrain_rubric(parse_rubric(text), step_harness, step_pool, random.Random(seed), sec.must_include_weight)
        followed += rubric.followed
        problems.update(re.sub(r"'[^']*'", "'X'", p) for p in rubric.problems)
        rows.append({"followed": rubric.followed, "problems": rubric.problems, "reply": text})
    return {"n": n, "followed": followed, "followed_rate": round(followed / n, 3), "problems": dict(problems),
            "reply_tokens_mean": round(sum(len(loaded.tokenizer.encode(t)) for t in replies) / n, 1),
            "seconds": round(time.time() - t0, 1), "replies": rows}


def probe_evaluation(loaded, cfg, n: int, seed: int, batch: int) -> dict:
    sec = cfg.score
    pool = [d.lower() for d in sec.dimension_pool]
    harness = mh.starting_harness(sec, pool)
    must = harness["dimension_constraints"]["must_include"]
    rng = random.Random(seed)
    extra = [d for d in pool if d not in must]
    rubric = [(m, harness["dimension_constraints"]["weight_max"]) for m in must] + [
        (d, round(rng.uniform(0.1, 0.5), 2)) for d in rng.sample(extra, harness["dimension_constraints"]["k"] - len(must))]
    rows = [json.loads(line) for line in DOCS.read_text().splitlines() if line.strip()]
    picked = rng.sample(rows, n)
    prompts = []
    for r in picked:
        report = f"{r['text']}\n\nConclusion: {r['title']} matters for the reasons above."
        msgs = evaluation_messages(harness, rubric, title_query(r["title"]), report, sec.score_scale)
        prompts.append(chat(loaded.tokenizer, msgs[0]["content"], msgs[1]["content"]))
    tool = SearchTool(InMemoryRetriever.from_jsonl(DOCS), k=sec.top_k, max_tokens=sec.max_tool_tokens,
                      tokenizer=loaded.tokenizer)
    params = SamplingParams(temperature=sec.evaluator_temperature, top_p=1.0,
                            max_new_tokens=sec.evaluator_max_new_tokens)
    loaded.generator.rng = torch.Generator().manual_seed(seed)
    t0, evals = time.time(), []
    for i in range(0, n, batch):
        evals += multi_turn_rollout(loaded.generator, loaded.tokenizer, prompts[i:i + batch], params, tool,
                                    max_turns=sec.evaluator_max_turns, final_tag="scores",
                                    max_total_tokens=sec.evaluator_trajectory_tokens())
    dims = [d for d, _ in rubric]
    scores = [parse_scores(e.turns[-1]["text"] if e.turns else "", dims, sec.score_scale) for e in evals]
    return {"part": "evaluation", "n": n, "rubric": rubric,
            "searches_mean": round(sum(e.n_searches for e in evals) / n, 2),
            "searched_rate": round(sum(e.n_searches > 0 for e in evals) / n, 3),
            "well_formed_rate": round(sum(s.well_formed for s in scores) / n, 3),
            "truncated_rate": round(sum(e.truncated for e in evals) / n, 3),
            "tokens_mean": round(sum(len(e.completion_ids) for e in evals) / n, 1),
            "seconds": round(time.time() - t0, 1),
            "replies": [{"searches": e.n_searches, "well_formed": s.well_formed, "missing": s.missing,
                         "truncated": e.truncated, "reply": e.text} for e, s in zip(evals, scores)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b-instruct", help="base:<name>, a name, or a model folder")
    ap.add_argument("--config", default=str(ROOT / "benchmarks" / "gpu" / "learn_score.yaml"))
    ap.add_argument("--part", choices=("rubric", "evaluation"), default="rubric")
    ap.add_argument("--n", type=int, default=32, help="prompts (a rubric prompt shows 8 different queries)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=4, help="replies to print")
    ap.add_argument("--out", help="write the whole result (replies included) as JSON here")
    args = ap.parse_args()
    cfg = load_config(args.config, ["train.device=cpu", "corpus.path=null"])
    spec = args.model if ":" in args.model or "/" in args.model else f"base:{args.model}"
    run = probe if args.part == "rubric" else probe_evaluation
    result = run(load_model(spec, device="cpu"), cfg, args.n, args.seed, args.batch)
    for row in result["replies"][: args.show]:
        print("----", {k: v for k, v in row.items() if k != "reply"})
        print(row["reply"].strip()[:600])
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "replies"}))


if __name__ == "__main__":
    main()
