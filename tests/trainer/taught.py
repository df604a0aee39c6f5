"""A tiny random-init model taught a few exact continuations, for end-to-end tests of the
recipes' "valid" paths.

A random-init model never writes parsable JSON or a closed tag, so on its own it only
exercises the invalid paths. ``teach`` fits the tiny model (AdamW on plain next-token
cross-entropy over the taught tokens) until it reproduces them; sampled at a low temperature
it then writes them back. It is a real model running through the real generator, update and
recipe code.

A sequence is a list of ``(token ids, taught)`` segments, so one multi-turn conversation
(prompt, turn one, tool or user text, turn two ...) teaches every turn in one pass.
"""
from __future__ import annotations

from pathlib import Path

import torch

Segments = list[tuple[list[int], bool]]


def pair(context: list[int], continuation: list[int]) -> Segments:
    return [(list(context), False), (list(continuation), True)]


_TAUGHT: dict[str, Path] = {}  # this process's lessons already taught -> the folder they were saved to


def teach(src: str | Path, dest: str | Path, sequences: list[Segments], steps: int = 300, lr: float = 1e-2,
          seed: int = 0, target_loss: float = 0.02) -> Path:
    """Fit the model at ``src`` on the taught segments of ``sequences`` and save it to ``dest``.

    The fit is deterministic (one thread, a fixed seed), so the same lessons taught again in this process are a copy
    of the first result (two SSP tests teach the same lessons; each fit takes ~35 s on the CI machine)."""
    import hashlib
    import shutil

    from transformers import AutoModelForCausalLM, AutoTokenizer

    key = hashlib.sha256(repr((str(src), sequences, steps, lr, seed, target_loss)).encode()).hexdigest()
    done = _TAUGHT.get(key)
    if done is not None and (done / "config.json").is_file():
        shutil.copytree(done, dest)
        return Path(dest)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    rows = []
    for segments in sequences:
        ids = torch.tensor([t for seg, _ in segments for t in seg])[None]  # [1, L]
        taught = torch.tensor([flag for seg, flag in segments for _ in seg])[1:]  # [L-1]: next token is taught
        rows.append((ids, taught, ids[0, 1:][taught]))
    n_taught = sum(int(t.sum()) for _, t, _ in rows)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a small model on a shared machine: one thread is the fastest
    used = 0
    for used in range(1, steps + 1):
        opt.zero_grad()
        total = 0.0
        for ids, taught, labels in rows:  # one sequence at a time: no padding
            hidden = model.get_decoder()(input_ids=ids).last_hidden_state[0, :-1][taught]  # [N, H]
            logits = model.get_output_embeddings()(hidden)  # [N, V]: the head only where taught
            loss = torch.nn.functional.cross_entropy(logits, labels, reduction="sum") / n_taught
            loss.backward()
            total += loss.item()
        opt.step()
        if total < target_loss:
            break
    torch.set_num_threads(threads)
    model.config.taught_steps = used
    dest = Path(dest)
    model.eval().save_pretrained(dest)
    AutoTokenizer.from_pretrained(src).save_pretrained(dest)
    _TAUGHT[key] = dest
    return dest
