"""A step's costs in the ``system`` role: generate calls and CUDA-graph captures counted per step, and the
time outside generation and the update (issue 22 item 5: step <= 1.3 x (rollout + update))."""
import pytest
import torch
from transformers import AutoModelForCausalLM

from trainer.context import combine_rank_metrics, with_overhead
from trainer.rollout import HFGenerator, SamplingParams
from trainer.runner import MeteredGenerator


def test_overhead_is_the_step_outside_rollout_and_update():
    got = with_overhead({"rollout_seconds": 6.0, "update_seconds": 2.0, "rollout_tokens": 10}, 10.0)
    assert got["other_seconds"] == pytest.approx(2.0)
    assert got["overhead_ratio"] == pytest.approx(1.25)
    assert got["rollout_tokens"] == 10


def test_overhead_is_absent_without_rollout_or_update_time():
    assert "overhead_ratio" not in with_overhead({"rollout_seconds": 0.0}, 5.0)
    assert with_overhead({"rollout_seconds": 3.0}, 2.5)["other_seconds"] == 0.0  # timer skew never goes negative


def test_captures_add_up_over_ranks():
    got = combine_rank_metrics([{"system": {"graph_captures": 3.0, "graph_capture_seconds": 1.0}},
                                {"system": {"graph_captures": 2.0, "graph_capture_seconds": 2.5}}])
    assert got["system"]["graph_captures"] == 5.0
    assert got["system"]["graph_capture_seconds"] == 2.5  # ranks capture side by side: the slowest counts


def test_metered_generator_counts_calls_per_step(tiny_model_dir, smollm2_tokenizer):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    gen = MeteredGenerator(HFGenerator(model, smollm2_tokenizer))
    params = SamplingParams(temperature=1.0, max_new_tokens=4)
    prompt = smollm2_tokenizer("a short prompt")["input_ids"]
    gen.generate([prompt, prompt], params)
    gen.generate([prompt], params)
    step = gen.take()
    assert step["rollout_calls"] == 2
    assert step["graph_captures"] == 0 and step["graph_capture_seconds"] == 0.0  # CPU: no CUDA graphs
    assert 3 <= step["rollout_tokens"] <= 12 and step["rollout_seconds"] > 0
    assert gen.inner.last_stats["rows"] == 1 and gen.inner.last_stats["seconds"] > 0
    assert gen.take()["rollout_calls"] == 0  # counts start again each step


def test_the_gc_clock_counts_collections_and_starts_again_when_taken():
    import gc

    from trainer.context import gc_clock

    clock = gc_clock()
    assert gc_clock() is clock and sum(isinstance(c, type(clock)) for c in gc.callbacks) == 1  # installed once
    clock.take()
    for _ in range(50):  # cycles only the collector frees
        a, b = [], []
        a.append(b)
        b.append(a)
    gc.collect()
    first = clock.take()
    assert first > 0
    assert clock.take() == 0.0
