"""HFGenerator decodes a call's rows in chunks whose KV cache fits a memory budget (memfix: a SPICE
Reasoner call of 1,176 rows needed a 43 GB static cache for a 1.5B model and ran the GPU out of memory).

On the tiny random-init Llama of test_static_decode.py: a forced small budget gives the greedy tokens and
log-probs of one call, in the prompts' order, in both the static-cache step and the eager loop; sampled
rows report the log-probs a plain forward gives; the chunk arithmetic (bytes a position, rows a chunk,
groups of one prompt kept together) on the shipped Qwen2.5-1.5B numbers.
"""
from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config

from tests.trainer.test_static_decode import QUESTIONS, assert_same, make_tiny, prompts_of
from trainer.rollout import HFGenerator, SamplingParams
from trainer.rollout.hf import kv_bytes_per_position, plan_row_chunks, rows_per_chunk


@pytest.fixture(scope="module")
def tok(smollm2_tokenizer):
    return smollm2_tokenizer


@pytest.fixture(scope="module")
def tiny(tok):
    return make_tiny(tok)


def test_bytes_a_position_and_rows_a_chunk_for_qwen25_15b():
    qwen = Qwen2Config(num_hidden_layers=28, hidden_size=1536, num_attention_heads=12, num_key_value_heads=2,
                       vocab_size=151936)
    per_position = kv_bytes_per_position(qwen, torch.bfloat16)
    assert per_position == 2 * 28 * 2 * 128 * 2 == 28672
    assert kv_bytes_per_position(qwen, torch.float32) == 2 * per_position
    row = 1280 * per_position  # prompt + 1,024 new tokens
    assert 1176 * row == pytest.approx(43.2e9, rel=0.01)  # the SPICE Reasoner call that ran out of memory
    # a 25 GB budget: 681 rows fit; the static step's storage has batch_bucket(n) rows -> 512 a chunk
    assert rows_per_chunk(25 * 10**9, row, 1176, bucketed=False) == 25 * 10**9 // row == 681
    assert rows_per_chunk(25 * 10**9, row, 1176, bucketed=True) == 512
    assert rows_per_chunk(None, row, 1176, bucketed=True) == 1176  # no limit (the CPU)
    assert rows_per_chunk(50 * 10**9, row, 1176, bucketed=False) == 1176  # everything fits: one chunk
    assert rows_per_chunk(10**12, row, 20, bucketed=True) == 20
    assert rows_per_chunk(20 * row, row, 20, bucketed=True) == 16  # 20 rows would take bucket 24
    assert rows_per_chunk(1, row, 8, bucketed=True) == rows_per_chunk(1, row, 8, bucketed=False) == 1


def test_rows_of_one_prompt_stay_in_one_chunk_where_they_fit():
    keys = ["a", "b", "a", "c", "b", "a", "d", "d"]  # groups a x3, b x2, c, d x2
    assert plan_row_chunks(keys, 8) == [list(range(8))]
    chunks = plan_row_chunks(keys, 4)
    assert chunks == [[0, 2, 5], [1, 3, 4], [6, 7]]  # a's 3, then b's 2 + c, then d's 2 (not split)
    assert sorted(i for c in chunks for i in c) == list(range(8))
    assert all(len(c) <= 4 for c in chunks) and chunks == [sorted(c) for c in chunks]
    for key in "abc":  # every group that fits a chunk is in one
        assert sum(any(keys[i] == key for i in c) for c in chunks) == 1
    big = plan_row_chunks(["x"] * 7 + ["y"], 3)  # a group larger than a chunk is split, nothing lost
    assert [len(c) for c in big] == [3, 3, 2] and sorted(i for c in big for i in c) == list(range(8))


@pytest.mark.parametrize("static", [True, False])
def test_a_small_budget_gives_the_greedy_tokens_of_one_call(tiny, tok, static):
    prompts = prompts_of(tok, QUESTIONS)  # "Hi" x3 and "Why?" x2 among 8 rows
    params = SamplingParams(temperature=0, max_new_tokens=20)
    whole_gen = HFGenerator(tiny, tok, static_cache=static)
    whole = whole_gen.generate(prompts, params)
    assert whole_gen.last_stats["chunks"] == 1 and whole_gen.last_stats["kv_budget_bytes"] is None  # CPU: no limit
    row = whole_gen.last_stats["kv_bytes_per_row"]
    for budget, most in ((1, 1), (3 * row, 2 if static else 3)):
        gen = HFGenerator(tiny, tok, static_cache=static, kv_budget_bytes=budget)
        chunked = gen.generate(prompts, params)
        assert_same(whole, chunked)
        assert [o.prompt_ids for o in chunked] == prompts
        stats = gen.last_stats
        assert stats["decode"] == ("static" if static else "eager")
        assert stats["chunk_rows"] == most and stats["chunks"] >= -(-len(prompts) // most) and stats["rows"] == 8
        assert stats["kv_budget_bytes"] == budget and stats["tokens"] == sum(len(o.completion_ids) for o in whole)
    if static:  # chunks of 2: "Hi" x3 split once, "Why?" x2 together -> 6 prefills (one call: 5)
        assert gen.last_stats["prefill_rows"] == 6 and whole_gen.last_stats["prefill_rows"] == 5


def test_the_chunks_of_a_call_share_one_static_storage(tiny, tok):
    """Chunks of different prompt widths (19 and 30 tokens + 100 new) would round to capacities 128 and
    256, and the decoder keeps a storage of another capacity alive beside a new one: twice the budget.
    Every chunk takes the whole call's capacity, so one storage serves them all."""
    prompts = prompts_of(tok, QUESTIONS)
    params = SamplingParams(temperature=0, max_new_tokens=100)
    whole_gen = HFGenerator(tiny, tok, static_cache=True)
    whole = whole_gen.generate(prompts, params)
    gen = HFGenerator(tiny, tok, static_cache=True, kv_budget_bytes=3 * whole_gen.last_stats["kv_bytes_per_row"])
    assert_same(whole, gen.generate(prompts, params))
    assert gen.last_stats["chunks"] == 4 and gen.last_stats["chunk_rows"] == 2
    assert [(st.rows, st.cap) for st in gen._static.storages] == [(2, 256)]


def test_sampled_rows_report_their_own_logprobs(tiny, tok):
    """Chunks draw from the sampler's RNG one after another (not the draws of one call), but every
    row's log-probs are still log softmax(logits / T) of its tokens under the model."""
    prompts = prompts_of(tok, QUESTIONS[:5])
    params = SamplingParams(temperature=0.8, max_new_tokens=12)
    gen = HFGenerator(tiny, tok, static_cache=True, seed=3, kv_budget_bytes=1)
    out = gen.generate(prompts, params)
    assert gen.last_stats["chunks"] == 5
    for o in out:
        ids = torch.tensor([o.prompt_ids + o.completion_ids])
        with torch.no_grad():
            logits = tiny(input_ids=ids).logits[0].float()  # [L, V]
        P, n = len(o.prompt_ids), len(o.completion_ids)
        lp = torch.log_softmax(logits[P - 1 : P - 1 + n] / 0.8, dim=-1)
        want = lp.gather(1, torch.tensor(o.completion_ids)[:, None]).squeeze(1)
        assert o.logprobs == pytest.approx(want.tolist(), abs=1e-4)


def test_a_budget_must_be_positive(tiny, tok):
    with pytest.raises(ValueError, match="kv_budget_bytes"):
        HFGenerator(tiny, tok, kv_budget_bytes=0)
