"""The one end-to-end test on the REAL SmolLM2-135M-Instruct (imported from the bundled GGUF):
a SPICE step on three Wikipedia summaries trains the real model on the CPU, writes its tasks
with the real Challenger text, and leaves a checkpoint that loads as a Hugging Face model."""
from __future__ import annotations

import json

import torch

import trainer
from trainer.tools.corpus import corpus_path, read_jsonl_corpus


def test_a_spice_step_on_smollm2(smollm2_dir, tmp_path):
    docs = read_jsonl_corpus(corpus_path("bundled:wikipedia"))[:3]
    corpus = tmp_path / "wiki3.jsonl"
    corpus.write_text("".join(json.dumps({"title": d.title, "text": d.text}) + "\n" for d in docs))
    cfg = {
        "method": "spice", "seed": 0,
        "model": {"name_or_path": str(smollm2_dir), "lora": {"r": 0}},
        "corpus": {"path": str(corpus)},
        "rollout": {"max_new_tokens": 24, "group_size": 2, "temperature": 0.7},
        "train": {"steps": 1, "prompts_per_step": 2, "micro_batch_size": 4, "device": "cpu", "lr": 1e-6},
        # SmolLM2-135M writes task JSON when the turn opens with it after a worked example (its configs do so); an
        # attempt that parses (-0.5 when a gate rule refuses it) beside one that does not (-1) gives a gradient
        "spice": {"challenger_attempts": 2, "challenger_group_size": 2, "format_max_new_tokens": 24,
                  "max_document_tokens": 128, "think_before_task": False, "worked_example": True,
                  "task_max_new_tokens": 96},
        "checkpoint": {"every": 1, "keep_last": 1},
    }
    result = trainer.run(cfg, run_dir=tmp_path / "run")
    assert result.steps == 1 and result.final_checkpoint
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    challenger = [s for s in samples if s["kind"] == "attempt" and s["role"] == "challenger"]
    assert len(challenger) == 4 and all(s["text"].strip() for s in challenger)  # the model's own words
    assert {s["document_id"] for s in samples if s["kind"] == "task"} <= {str(i) for i in range(3)}
    metrics = {m["role"]: m for m in map(json.loads, (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())}
    assert metrics["system"]["rollout_tokens"] > 0 and 0.0 <= metrics["challenger"]["valid_rate"] <= 1.0
    assert metrics["challenger"]["samples"] == 4  # both kept attempts of both documents reached the update
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(result.final_checkpoint + "/model")
    assert model.num_parameters() > 100_000_000  # the whole 135M model, not an adapter
    base = dict(AutoModelForCausalLM.from_pretrained(str(smollm2_dir)).named_parameters())
    moved = [n for n, p in model.named_parameters() if not torch.equal(p, base[n].to(p.dtype))]
    assert moved, "the SPICE step's update left every weight as it was"
