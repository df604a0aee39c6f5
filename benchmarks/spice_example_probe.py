"""Does the SPICE Challenger's worked example help a capable instruct model? (issue 21, item 2)

Runs the recipe's own Challenger (``spice_tasks.challenge``: both turns, the prefills, the strict
parsing and the copy rule, exactly as training does) with a real model on the CPU over the first
N documents of ``examples/data/wiki_small.jsonl``, A attempts per document, once with
``spice.worked_example`` on and once off, same seed. Per arm: turn-one parse rate, valid tasks,
tasks refused as restating the example, the other invalid reasons, and a grounding proxy: the
share of a valid question's content words that occur in its document. Every task is printed.

``--paraphrases K`` instead asks the model to reword each worked example K times and prints
whether ``copies_example`` catches each rewording (the real paraphrases of the tests).

    .venv/bin/python benchmarks/spice_example_probe.py --model qwen2.5-coder-0.5b-instruct --docs 4 --attempts 4
    .venv/bin/python benchmarks/spice_example_probe.py --model qwen2.5-coder-0.5b-instruct --paraphrases 4
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import time
from pathlib import Path

import torch

torch.set_num_threads(1)

from trainer.evaluate import _spice_ctx, load_model, spice_section  # noqa: E402
from trainer.methods.spice_tasks import (  # noqa: E402
    EXAMPLE_QUESTIONS, MCQ_EXAMPLE_QUESTION, ExampleSignature, challenge, copies_example)
from trainer.prompts import chat  # noqa: E402
from trainer.rollout import SamplingParams  # noqa: E402
from trainer.tools.corpus import Document  # noqa: E402

DOCS = Path(__file__).resolve().parents[1] / "examples" / "data" / "wiki_small.jsonl"
REWORD = ("Rewrite the following question in your own words. Keep its meaning and its numbers. "
          "Reply with only the rewritten question.\n\n{question}")


def documents(n: int) -> list[Document]:
    rows = [json.loads(line) for line in DOCS.read_text().splitlines() if line.strip()][:n]
    return [Document(str(i), r["title"], r["text"]) for i, r in enumerate(rows)]


def grounding(question: str, doc: Document) -> float:
    """Share of the question's content words (the copy rule's stems) found among the document's."""
    mine, theirs = ExampleSignature.of(question).words, ExampleSignature.of(doc.title + " " + doc.text).words
    return len(mine & theirs) / len(mine) if mine else 0.0


def probe(loaded, docs, attempts: int, worked_example: bool, args) -> dict:
    section = spice_section({"challenger_attempts": attempts, "max_document_tokens": args.doc_tokens,
                             "format_max_new_tokens": args.format_tokens, "worked_example": worked_example})
    sampling = SamplingParams(temperature=args.temperature, top_p=1.0, max_new_tokens=args.task_tokens)
    loaded.generator.rng = torch.Generator().manual_seed(args.seed)
    t0 = time.time()
    out = challenge(_spice_ctx(loaded, section, sampling), docs, step=0)
    by_doc = {d.id: d for d in docs}
    reasons = collections.Counter(re.sub(r"'.*", "'...'", a.reason)[:70] for a in out if not a.valid)
    valid = [a for a in out if a.valid]
    tasks = [{"doc": a.doc_title, "valid": a.valid, "reason": a.reason,
              "question": a.task.question if a.task else _question_of(a), "answer": a.task.answer if a.task else None,
              "type": a.task.answer_type if a.task else (a.choice.answer_type or a.choice.format) if a.choice else None,
              "grounding": round(grounding(a.task.question, by_doc[a.doc_id]), 2) if a.task else None}
             for a in out]
    return {"worked_example": worked_example, "n": len(out), "turn1_parsed": sum(a.choice is not None for a in out),
            "valid": len(valid), "restates_example": sum("copies the prompt's example" in a.reason for a in out),
            "invalid_reasons": dict(reasons),
            "grounding_mean": round(sum(t["grounding"] for t in tasks if t["valid"]) / len(valid), 2) if valid else None,
            "seconds": round(time.time() - t0, 1), "tasks": tasks}


def _question_of(a) -> str | None:
    """The question text of an invalid attempt's last turn, when it has one (for the listing)."""
    text = a.turns[-1]["text"] if a.turns and a.turns[-1]["role"] == "assistant" and a.choice else ""
    found = re.search(r'"(?:question|multiple_choice_question)"\s*:\s*"([^"]*)', text)
    return found.group(1) if found else None


def paraphrases(loaded, k: int, args) -> list[dict]:
    examples = [*EXAMPLE_QUESTIONS.values(), MCQ_EXAMPLE_QUESTION]
    tok = loaded.tokenizer
    prompts = [chat(tok, None, REWORD.format(question=q)) for q in examples for _ in range(k)]
    loaded.generator.rng = torch.Generator().manual_seed(args.seed)
    outs = loaded.generator.generate(prompts, SamplingParams(temperature=args.temperature, max_new_tokens=80))
    rows = []
    for i, c in enumerate(outs):
        text = c.text.strip().strip('"').splitlines()[0].strip() if c.text.strip() else ""
        rows.append({"example": examples[i // k][:40], "paraphrase": text, "caught": copies_example(text)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--docs", type=int, default=4)
    ap.add_argument("--attempts", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--doc-tokens", type=int, default=384)
    ap.add_argument("--format-tokens", type=int, default=96)
    ap.add_argument("--task-tokens", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arms", default="on,off", help="which arms to run: on, off or on,off")
    ap.add_argument("--paraphrases", type=int, default=0, help="reword each example this many times instead")
    args = ap.parse_args()
    loaded = load_model(f"base:{args.model}", device="cpu")
    if args.paraphrases:
        for row in paraphrases(loaded, args.paraphrases, args):
            print(json.dumps(row))
        return
    docs = documents(args.docs)
    for arm in args.arms.split(","):
        result = probe(loaded, docs, args.attempts, arm == "on", args)
        tasks = result.pop("tasks")
        print(json.dumps({"model": args.model, "temperature": args.temperature, **result}), flush=True)
        for t in tasks:
            print("   ", json.dumps(t), flush=True)


if __name__ == "__main__":
    main()
