"""A tiny random-init model taught a few exact continuations, for end-to-end tests of the
recipes' "valid" paths.

A random-init model never writes parsable JSON or a closed tag, so on its own it only
exercises the invalid paths. ``teach`` fits the tiny model (a few hundred AdamW steps of
plain next-token cross-entropy on the continuation tokens) until it reproduces each given
continuation of each given context; sampled at a low temperature it then writes them back.
It is a real model running through the real generator, update and recipe code.
"""
from __future__ import annotations

from pathlib import Path

import torch


def teach(src: str | Path, dest: str | Path, examples: list[tuple[list[int], list[int]]], steps: int = 300,
          lr: float = 1e-2, seed: int = 0, target_loss: float = 0.02) -> Path:
    """Fit the model at ``src`` on (context ids, continuation ids) pairs and save it to ``dest``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    width = max(len(c) + len(t) for c, t in examples)
    ids = torch.zeros(len(examples), width, dtype=torch.long)  # [B, L] right-padded
    labels = torch.full((len(examples), width), -100, dtype=torch.long)  # [B, L] loss on continuations only
    for i, (context, target) in enumerate(examples):
        row = list(context) + list(target)
        ids[i, : len(row)] = torch.tensor(row)
        labels[i, len(context) : len(row)] = torch.tensor(target)
    target = labels[:, 1:] != -100  # [B, L-1] positions whose next token is taught
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a small model on a shared machine: one thread is the fastest
    for used in range(1, steps + 1):
        hidden = model.get_decoder()(input_ids=ids).last_hidden_state[:, :-1][target]  # [N, H]
        logits = model.get_output_embeddings()(hidden)  # [N, V]: the head only where it is taught
        loss = torch.nn.functional.cross_entropy(logits, labels[:, 1:][target])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < target_loss:
            break
    torch.set_num_threads(threads)
    model.config.taught_steps = used
    dest = Path(dest)
    model.eval().save_pretrained(dest)
    AutoTokenizer.from_pretrained(src).save_pretrained(dest)
    return dest
