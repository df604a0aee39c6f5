"""Trainer test fixtures (no Django): a tiny random-init Llama with the SmolLM2 tokenizer.

- ``tiny_model_dir``: session-scoped folder with a 2-layer, hidden-64 Llama (random weights,
  seed 0) and SmolLM2's tokenizer, saved like any Hugging Face model. Building it takes a few
  seconds once per session; every trainer test can load it with ``model.name_or_path`` set to
  this path.
- ``tiny_config(method="grpo", **sections)``: a config dict for the tiny model on CPU with short
  rollouts; nested keyword dicts update the defaults (``tiny_config(train={"steps": 3})``).
- ``smollm2_dir``: the REAL SmolLM2-135M-Instruct imported from the bundled GGUF into the data dir
  the suite started with (about 35 s, once; ``make test`` does it before the suite).
"""
from __future__ import annotations

import copy
import json
import os

import pytest
import torch

# The test machine is small and shared: one torch thread per process avoids OpenMP thrashing
# (measured 10x faster matmuls than two threads under load). SELFPLAY_TORCH_THREADS overrides.
torch.set_num_threads(int(os.environ.get("SELFPLAY_TORCH_THREADS", "1")))

def _models_dir_at_start():
    from trainer.models import models_dir

    return models_dir()


_STARTING_MODELS_DIR = _models_dir_at_start()  # tests move SELFPLAY_DATA_DIR; the shared import stays here

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=4096, rope_theta=10000.0, tie_word_embeddings=True)


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    from trainer.models import bundled_tokenizer

    return bundled_tokenizer("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smollm2_tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = smollm2_tokenizer
    out = tmp_path_factory.mktemp("tiny-llama")
    config = LlamaConfig(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id, **TINY)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_prompts_path(tmp_path_factory):
    """A 12-line JSONL prompt set with easy arithmetic answers."""
    path = tmp_path_factory.mktemp("data") / "arith.jsonl"
    rows = [{"prompt": f"What is {a} + {b}?", "answer": str(a + b)} for a in range(3) for b in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def tiny_config(tiny_model_dir, tiny_prompts_path):
    def build(method: str = "grpo", **sections) -> dict:
        cfg = {
            "method": method,
            "seed": 0,
            "model": {"name_or_path": str(tiny_model_dir), "lora": {"r": 0}, "policies": "shared"},
            "rollout": {"max_new_tokens": 8, "temperature": 1.0, "group_size": 4},
            "train": {"steps": 2, "lr": 1e-3, "prompts_per_step": 2, "micro_batch_size": 4, "device": "cpu"},
            "checkpoint": {"every": 1, "keep_last": 2},
        }
        if method == "grpo":
            cfg["data"] = {"path": str(tiny_prompts_path)}
        for key, value in sections.items():
            if isinstance(value, dict) and isinstance(cfg.get(key), dict):
                cfg[key] = {**cfg[key], **copy.deepcopy(value)}
            else:
                cfg[key] = copy.deepcopy(value)
        return cfg

    return build


@pytest.fixture(scope="session")
def smollm2_dir():
    """The real SmolLM2-135M-Instruct, imported once from the bundled GGUF (about 35 s) into the data dir the suite
    started with (``make test`` imports it before the suite, as ``make demo`` does; import_gguf locks, so pytest-xdist
    workers share one import). Tests only read it; the import itself is tested on fresh data dirs
    (tests/web/runs/test_bundled_resume.py)."""
    from trainer.models import BUNDLED, import_bundled

    name = "smollm2-135m-instruct"
    assert name in BUNDLED
    return import_bundled(name, _STARTING_MODELS_DIR / name)


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """A fresh $SELFPLAY_DATA_DIR for the test."""
    monkeypatch.setenv("SELFPLAY_DATA_DIR", str(tmp_path / "var"))
    return tmp_path / "var"
