"""How far one optimizer step moves the policy: full fine-tune vs a LoRA adapter, on a real model on the CPU.

SCOPE and pi-Play train one LoRA adapter per role at the papers' full fine-tune learning rate (1e-6).
An early Adam step moves every trained number by about lr, so an adapter (B starts at zero; its
first steps move B only, and the weight by s * dB * A) moves the policy far less than a full
fine-tune step at the same lr. This script measures it with the product's own parts: the policy
loaded by ``trainer.models.load_policy`` (peft adapter r=64, alpha=32 on all linear layers, as the
recipes' defaults), the engine of ``trainer.engine.make_engine`` (AdamW) and the update pass
``trainer.update.policy_update`` on 8 chat completions with advantages +1/-1 (a GRPO group's shape).

For each setting it reports, after 1 and after 3 optimizer steps on that batch:
- ``gain``: the first-order objective change, mean over trained tokens of A * (log p_new - log p_old);
- ``kl``: mean per-token KL(old || new) over the completions (full distributions);
and each as a ratio to the full fine-tune's. Settings: full fine-tune at lr; the adapter at lr
(``model.lora.lr: train``, today's behaviour); the adapter with rsLoRA scaling (alpha / sqrt(r)) at lr;
the adapter at ``lr x sqrt(3) x hidden_size / alpha`` (``model.lora.lr: auto``); and the adapter at
lr x 30 and x 100 (where the match falls).

Run::

    .venv/bin/python benchmarks/lora_lr.py                      # SmolLM2-135M (hidden 576)
    .venv/bin/python benchmarks/lora_lr.py --model qwen2.5-coder-0.5b-instruct   # hidden 896

Prints one table per model and writes it as JSON with ``--out``.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import time

import torch

PAIRS = [
    ("What is 17 + 25?", "17 + 25 = 42. The answer is 42."),
    ("Name the capital of France.", "The capital of France is Paris."),
    ("How many legs does a spider have?", "A spider has eight legs."),
    ("What is 9 times 7?", "9 times 7 is 63."),
    ("Who wrote Hamlet?", "Hamlet was written by William Shakespeare."),
    ("What gas do plants take in?", "Plants take in carbon dioxide from the air."),
    ("What is the boiling point of water in Celsius?", "Water boils at 100 degrees Celsius at sea level."),
    ("Spell the word cat backwards.", "Backwards, cat is spelled tac."),
]


def config(model: str, lora: dict, lr: float):
    from trainer.config import load_config

    return load_config({"method": "grpo", "data": {"path": "bundled:gsm8k"},  # the data is not read here
                        "model": {"name_or_path": model, "lora": lora, "policies": "shared"},
                        "train": {"lr": lr, "device": "cpu", "engine": "torch", "micro_batch_size": 8,
                                  "grad_clip": 0.0, "warmup_steps": 0, "kl_coef": 0.0},
                        "rollout": {"max_new_tokens": 64, "temperature": 1.0}})


def batch(tok):
    from trainer.prompts import chat

    out = []
    for i, (q, a) in enumerate(PAIRS):
        prompt = chat(tok, None, q)
        completion = tok.encode(a, add_special_tokens=False) + [tok.eos_token_id]
        out.append((prompt, completion, 1.0 if i % 2 == 0 else -1.0))
    return out


@torch.no_grad()
def logprobs(model, rows) -> list[torch.Tensor]:
    """Per row, log-softmax over the vocabulary at each completion position [C, V]."""
    out = []
    for prompt, completion, _ in rows:
        ids = torch.tensor([prompt + completion])
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:len(prompt) - 1 + len(completion)].float()
        out.append(torch.log_softmax(logits, -1))
    return out


def samples(rows, old):
    from trainer.update import Sample

    return [Sample(prompt_ids=p, completion_ids=c, loss_mask=[1] * len(c),
                   old_logprobs=lp.gather(-1, torch.tensor(c)[:, None])[:, 0].tolist(), advantage=a)
            for (p, c, a), lp in zip(rows, old)]


def measure(rows, old, new) -> dict[str, float]:
    gain, kl, tokens = 0.0, 0.0, 0
    for (_, c, a), lo, ln in zip(rows, old, new):
        idx = torch.tensor(c)[:, None]
        gain += float(a * (ln.gather(-1, idx) - lo.gather(-1, idx)).sum())
        kl += float((lo.exp() * (lo - ln)).sum())
        tokens += len(c)
    return {"gain": gain / tokens, "kl": kl / tokens}


def run_setting(model: str, lora: dict, lr: float, rows_fn, steps=(1, 3)) -> dict:
    from trainer.engine import make_engine
    from trainer.models import load_policy
    from trainer.update import policy_update

    cfg = config(model, lora, lr)
    torch.manual_seed(0)
    policy = load_policy(cfg, frozen=False)
    engine = make_engine(cfg, policy)
    rows = rows_fn(policy.tokenizer)
    old = logprobs(policy.model, rows)
    out, done = {}, 0
    for k in steps:
        while done < k:
            current = logprobs(policy.model, rows)
            policy_update(policy, engine, samples(rows, current), cfg)
            done += 1
        out[k] = measure(rows, old, logprobs(policy.model, rows))
    out["hidden_size"] = policy.base_model().config.hidden_size
    out["lr"] = engine.lr
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--lr", type=float, default=1e-6, help="the full fine-tune rate (the papers' 1e-6)")
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--alpha", type=float, default=32.0)
    ap.add_argument("--out", default=None, help="write the table as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    base = {"r": args.rank, "alpha": args.alpha}
    settings = [("full fine-tune", {"r": 0}), ("adapter at lr (lora.lr: train)", {**base, "lr": "train"}),
                ("adapter, rsLoRA scale, at lr", {**base, "lr": "train", "rslora": True}),
                ("adapter, lora.lr: auto", {**base, "lr": "auto"})]
    settings += [(f"adapter at lr x {m}", {**base, "lr": args.lr * m}) for m in (30, 100)]
    table = {}
    for name, lora in settings:
        t0 = time.perf_counter()
        table[name] = run_setting(args.model, lora, args.lr, batch)
        table[name]["seconds"] = time.perf_counter() - t0
        print(f"{name}: {json.dumps(table[name])}", flush=True)
    full = table["full fine-tune"]
    d = full["hidden_size"]
    print(f"\n{args.model} (hidden {d}), r={args.rank}, alpha={args.alpha}, full fine-tune lr {args.lr:g}; "
          f"auto = lr x sqrt(3) x {d} / {args.alpha:g} = lr x {math.sqrt(3) * d / args.alpha:.1f}")
    print(f"{'setting':34} {'adapter lr':>10} {'gain@1':>9} {'ratio':>6} {'gain@3':>9} {'ratio':>6} "
          f"{'kl@3':>9} {'ratio':>7}")
    for name, row in table.items():
        r1 = row[1]["gain"] / full[1]["gain"]
        r3 = row[3]["gain"] / full[3]["gain"]
        k3 = row[3]["kl"] / full[3]["kl"] if full[3]["kl"] else float("nan")
        print(f"{name:34} {row['lr']:10.3g} {row[1]['gain']:9.2e} {r1:6.3f} {row[3]['gain']:9.2e} {r3:6.3f} "
              f"{row[3]['kl']:9.2e} {k3:7.3f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"model": args.model, "lr": args.lr, "rank": args.rank, "alpha": args.alpha,
                       "table": {k: {str(s): v for s, v in row.items()} for k, row in table.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
