"""How often the real SmolLM2-135M-Instruct writes SPICE's Challenger formats so they parse.

Runs the recipe's own pieces (``format_prompt``/``task_prompt``, ``chat``/``continue_chat``,
``HFGenerator``, ``parse_format_choice``/``parse_task``: the same strict parsing as training)
over the first N documents of ``examples/data/wiki_small.jsonl`` on the CPU, one torch thread:

- turn one (format choice JSON) parse rate;
- turn two (task JSON) parse rate, on every conversation: a conversation whose turn one did not
  parse gets a fixed choice (cycling mcq / free-form integer / free-form string) so that turn two
  is measured on all N;
- end to end: both turns parse (what the recipe counts as a valid task);
- how many parsed tasks merely copy the prompt's example or placeholder (still valid to the parser).

``--prefill '{'`` opens both assistant turns with that text (prompt tokens, parsed with the reply).

    .venv/bin/python benchmarks/smollm2_formats.py --n 16 --temperature 1.0
"""
from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path

import torch

torch.set_num_threads(1)

from transformers import AutoModelForCausalLM  # noqa: E402

from trainer.methods.spice_tasks import continue_chat  # noqa: E402
from trainer.methods.spice_tasks import (  # noqa: E402
    ANSWER_TYPES, EXAMPLE_QUESTIONS, FormatChoice, TaskError, format_prompt, parse_format_choice, parse_task, task_prompt)
from trainer.models import load_tokenizer, resolve_model  # noqa: E402
from trainer.prompts import chat  # noqa: E402
from trainer.rollout import SamplingParams  # noqa: E402
from trainer.rollout.hf import HFGenerator  # noqa: E402

DOCS = Path(__file__).resolve().parents[1] / "examples" / "data" / "wiki_small.jsonl"
FORMAT_PREFILL = '{"suitable_for_mcq":'
TASK_PREFILL = {"mcq": '{"multiple_choice_question": "', "free_form": '{"question": "'}
FALLBACK = [FormatChoice("mcq", None), FormatChoice("free_form", "integer"), FormatChoice("free_form", "string")]


def documents(n: int, tok, max_tokens: int) -> list[str]:
    rows = [json.loads(line) for line in DOCS.read_text().splitlines() if line.strip()][:n]
    out = []
    for r in rows:
        body = tok.decode(tok.encode(r["text"], add_special_tokens=False)[:max_tokens])
        out.append(f"[BEGINNING OF THE DOCUMENT]\nTitle: {r['title']}\n\n{body}\n[END OF THE DOCUMENT]")
    return out


def copied_example(question: str) -> bool:
    """A parsed question that is the prompt's example or its placeholder, not a task of its own."""
    q = question.strip()
    return q in EXAMPLE_QUESTIONS.values() or "<question>" in q or "<the question>" in q or "Vienna and Budapest" in q


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--doc-tokens", type=int, default=384)
    ap.add_argument("--format-tokens", type=int, default=96)
    ap.add_argument("--task-tokens", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=0, help="print this many raw outputs per turn")
    ap.add_argument("--prefill-keys", action="store_true",
                    help="open turn one with the first JSON key and turn two with the chosen format's question key")
    ap.add_argument("--prefill", default="", help='text opening both assistant turns, e.g. "{" (parsed with the reply)')
    args = ap.parse_args()

    path = resolve_model("smollm2-135m-instruct")
    tok = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    gen = HFGenerator(model, tok, seed=args.seed)
    t0 = time.time()
    if args.prefill_keys:
        args.prefill = FORMAT_PREFILL
    pre = tok.encode(args.prefill, add_special_tokens=False) if args.prefill else []
    pre2 = {True: TASK_PREFILL["mcq"], False: TASK_PREFILL["free_form"]} if args.prefill_keys else {True: args.prefill,
                                                                                                    False: args.prefill}
    prompts = [chat(tok, None, format_prompt(d, ["mcq", "free_form"], list(ANSWER_TYPES))) + pre
               for d in documents(args.n, tok, args.doc_tokens)]
    p1 = SamplingParams(temperature=args.temperature, top_p=1.0, max_new_tokens=args.format_tokens)
    first = gen.generate(prompts, p1)
    choices, reasons1 = [], collections.Counter()
    for i, c in enumerate(first):
        try:
            choices.append((parse_format_choice(args.prefill + c.text, ["mcq", "free_form"], list(ANSWER_TYPES)), True))
        except TaskError as err:
            reasons1[str(err)[:60]] += 1
            choices.append((FALLBACK[i % len(FALLBACK)], False))
    second_prompts = [p + c.completion_ids + continue_chat(tok, task_prompt(ch, worked_example=True), c.finish_reason == "eos")
                      + tok.encode(pre2[ch.format == "mcq"], add_special_tokens=False)
                      for p, c, (ch, _) in zip(prompts, first, choices)]
    p2 = SamplingParams(temperature=args.temperature, top_p=1.0, max_new_tokens=args.task_tokens)
    second = gen.generate(second_prompts, p2)
    ok2, both, copied, reasons2 = 0, 0, 0, collections.Counter()
    for c, (ch, ok1) in zip(second, choices):
        try:
            task = parse_task(pre2[ch.format == "mcq"] + c.text, ch)
            ok2 += 1
            both += ok1
            copied += copied_example(task.question)
        except TaskError as err:
            reasons2[str(err)[:60]] += 1
    ok1 = sum(ok for _, ok in choices)
    n = args.n
    print(json.dumps({"n": n, "temperature": args.temperature, "turn1_parse": ok1 / n, "turn2_parse": ok2 / n,
                      "valid_task": both / n, "turn2_copied_example": copied, "prefill": args.prefill, "prefill_keys": args.prefill_keys, "turn1_fail": dict(reasons1), "turn2_fail": dict(reasons2),
                      "formats": dict(collections.Counter(ch.format if ok else "-" for ch, ok in choices)),
                      "seconds": round(time.time() - t0, 1)}))
    for c in first[:args.show]:
        print("T1>>", c.text.replace("\n", " ")[:400])
    for c in second[:args.show]:
        print("T2>>", c.text.replace("\n", " ")[:500])


if __name__ == "__main__":
    main()
