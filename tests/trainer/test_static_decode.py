"""The static-cache decode path of HFGenerator (trainer/rollout/static_decode.py).

On a GPU that path replays each decode step as a CUDA graph; here (CPU) the very same step
runs eagerly (``static_cache=True``), and every test compares it with the eager loop on a
tiny random-init Llama (conftest's shape, SmolLM2 tokenizer, init std 0.2 so that greedy
texts are varied rather than one repeated token): same greedy tokens, same logprobs to 1e-5, with ragged and
repeated prompts, stop strings, EOS, min_new_tokens, per-row caps, rows finishing at different
steps (the batch shrinks through the captured buckets) and a LoRA adapter on and off.
"""
from __future__ import annotations

import logging

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from trainer.config import ConfigError, load_config
from trainer.prompts import chat
from trainer.rollout import HFGenerator, SamplingParams
from trainer.rollout.static_decode import batch_bucket, capacity_bucket, unsupported_reason

QUESTIONS = ["Hi", "Tell me a long story about a dragon and a knight.", "Why?", "Hi",
             "What is two plus two?", "Hi", "Name three colours, please.", "Why?"]


@pytest.fixture(scope="module")
def tok(smollm2_tokenizer):
    return smollm2_tokenizer


def make_tiny(tok, attn: str = "sdpa") -> LlamaForCausalLM:
    from tests.trainer.conftest import TINY

    config = LlamaConfig(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
                         initializer_range=0.2, attn_implementation=attn, **TINY)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


@pytest.fixture
def tiny(tok):
    return make_tiny(tok)


def prompts_of(tok, questions):
    return [chat(tok, "You answer questions.", q) for q in questions]


def both(model, tok, prompts, params, **kw):
    """(eager loop outputs, static-cache outputs, the static generator)."""
    eager = HFGenerator(model, tok).generate(prompts, params, **kw)
    static_gen = HFGenerator(model, tok, static_cache=True)
    return eager, static_gen.generate(prompts, params, **kw), static_gen


def assert_same(eager, static):
    assert len(eager) == len(static)
    for e, s in zip(eager, static):
        assert s.completion_ids == e.completion_ids
        assert s.logprobs == pytest.approx(e.logprobs, abs=1e-5)
        assert (s.finish_reason, s.stop, s.text) == (e.finish_reason, e.stop, e.text)


def test_buckets():
    assert [batch_bucket(n) for n in (1, 2, 3, 5, 9, 16, 17, 24, 25, 33, 49, 64, 65, 97)] == \
        [1, 2, 4, 8, 16, 16, 24, 24, 32, 48, 64, 64, 96, 128]
    assert [capacity_bucket(n) for n in (1, 128, 129, 300)] == [128, 128, 256, 384]


def test_greedy_ragged_and_repeated_prompts_match_the_eager_loop(tiny, tok):
    prompts = prompts_of(tok, QUESTIONS)
    eager, static, gen = both(tiny, tok, prompts, SamplingParams(temperature=0, max_new_tokens=20))
    assert_same(eager, static)
    assert gen.last_stats["decode"] == "static"
    assert gen.last_stats["prefill_rows"] == 5  # "Hi" x3 and "Why?" x2 prefilled once
    assert all(len(o.completion_ids) >= 1 for o in static)


def test_seeded_sampling_draws_the_same_tokens(tiny, tok):
    # every row runs to the end, so both paths sample the same batch with the same draws
    # in float64: the two paths' logits differ in rounding (other attention shapes), and in float32 that rounding
    # once moved a draw onto the neighbouring token in the full suite (16994 for 16993 at step 6); 1e-16 cannot
    tiny = tiny.double()
    prompts = prompts_of(tok, QUESTIONS[:5])
    params = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=12, min_new_tokens=12)
    eager = HFGenerator(tiny, tok, seed=7).generate(prompts, params)
    static = HFGenerator(tiny, tok, seed=7, static_cache=True).generate(prompts, params)
    assert_same(eager, static)


def test_rows_ending_at_different_steps_shrink_the_batch(tiny, tok):
    prompts = prompts_of(tok, QUESTIONS)
    params = SamplingParams(temperature=0, max_new_tokens=24)
    free = HFGenerator(tiny, tok).generate(prompts, params)
    # make some tokens that the greedy texts produce at different steps count as EOS
    ends = {o.completion_ids[k] for o, k in zip(free, (1, 3, 5, 8, 13, 2, 21, 6))}
    tiny.generation_config.eos_token_id = sorted(ends)
    eager, static, gen = both(tiny, tok, prompts, params)
    assert_same(eager, static)
    lengths = sorted(len(o.completion_ids) for o in static)
    assert lengths[0] < lengths[-1] and any(o.finish_reason == "eos" for o in static)
    assert gen.last_stats["compactions"] >= 1  # 8 rows -> bucket 4 (or smaller) on the same memory
    # min_new_tokens holds EOS back the same way in both paths
    eager, static, _ = both(tiny, tok, prompts, SamplingParams(temperature=0, max_new_tokens=24, min_new_tokens=6))
    assert_same(eager, static)
    assert all(len(o.completion_ids) >= 6 for o in static)


@pytest.mark.parametrize("min_new", [0, 4])
def test_running_the_next_step_before_reading_this_one_changes_nothing(tiny, tok, min_new):
    """With graphs the next step is launched before the host reads the sampled tokens (a
    speculative step, wasted when every row stops); the same schedule runs here eagerly."""
    prompts = prompts_of(tok, QUESTIONS)
    params = SamplingParams(temperature=0, max_new_tokens=24, min_new_tokens=min_new)
    free = HFGenerator(tiny, tok).generate(prompts, SamplingParams(temperature=0, max_new_tokens=24))
    tiny.generation_config.eos_token_id = sorted({o.completion_ids[k] for o, k in zip(free, (1, 3, 5, 8, 13, 2, 21, 6))})
    eager = HFGenerator(tiny, tok).generate(prompts, params, max_new_tokens=[24, 3, 24, 24, 24, 7, 24, 24])
    gen = HFGenerator(tiny, tok, static_cache=True)
    gen._static_overlap = True
    static = gen.generate(prompts, params, max_new_tokens=[24, 3, 24, 24, 24, 7, 24, 24])
    assert_same(eager, static)
    assert gen.last_stats["compactions"] >= 1
    sampled = SamplingParams(temperature=1.0, max_new_tokens=10, min_new_tokens=10)
    seeded = HFGenerator(tiny, tok, seed=3, static_cache=True)
    seeded._static_overlap = True
    assert_same(HFGenerator(tiny, tok, seed=3).generate(prompts, sampled), seeded.generate(prompts, sampled))


def test_stop_strings_and_per_row_caps(tiny, tok):
    prompts = prompts_of(tok, QUESTIONS[:4])
    [free] = HFGenerator(tiny, tok).generate(prompts[:1], SamplingParams(temperature=0, max_new_tokens=24))
    stop = free.text[6:10]
    params = SamplingParams(temperature=0, max_new_tokens=24, stop=[stop])
    eager, static, _ = both(tiny, tok, prompts, params)
    assert_same(eager, static)
    assert static[0].finish_reason == "stop" and static[0].stop == stop
    eager, static, _ = both(tiny, tok, prompts, SamplingParams(temperature=0, max_new_tokens=9),
                            max_new_tokens=[2, 0, 50, 5])
    assert_same(eager, static)
    assert [len(o.completion_ids) for o in static] == [2, 0, 9, 5]
    gen = HFGenerator(tiny, tok, static_cache=True)  # nothing to generate: no storage, no fallback
    outs = gen.generate(prompts[:2], SamplingParams(max_new_tokens=4), max_new_tokens=[0, 0])
    assert [o.completion_ids for o in outs] == [[], []] and gen._static_off is None


def test_the_storage_is_reused_and_regrown_across_calls(tiny, tok):
    gen = HFGenerator(tiny, tok, static_cache=True)
    ref = HFGenerator(tiny, tok)
    params = SamplingParams(temperature=0, max_new_tokens=10)
    for questions in (QUESTIONS[:2], QUESTIONS[2:4], QUESTIONS, QUESTIONS[:3]):
        prompts = prompts_of(tok, questions)
        assert_same(ref.generate(prompts, params), gen.generate(prompts, params))
    assert len(gen._static.storages) == 1  # same capacity bucket: one storage, regrown to 8 rows
    assert gen._static.storages[0].rows == 8
    long_params = SamplingParams(temperature=0, max_new_tokens=200)  # another capacity bucket
    prompts = prompts_of(tok, QUESTIONS[:2])
    assert_same(ref.generate(prompts, long_params), gen.generate(prompts, long_params))
    assert sorted(st.cap for st in gen._static.storages) == [128, 256]


def test_lora_adapter_on_and_off(tiny, tok):
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(tiny, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"],
                                                 task_type="CAUSAL_LM"))
    torch.manual_seed(1)
    for name, p in peft_model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.5)
    prompts = prompts_of(tok, QUESTIONS[:3])
    params = SamplingParams(temperature=0, max_new_tokens=10)
    gen = HFGenerator(peft_model, tok, static_cache=True)
    ref = HFGenerator(peft_model, tok)
    for use_adapter in (True, False, True):
        assert_same(ref.generate(prompts, params, use_adapter=use_adapter),
                    gen.generate(prompts, params, use_adapter=use_adapter))
        assert gen.last_stats["decode"] == "static"


def test_config_key_and_auto_is_off_on_cpu(tiny, tok, caplog):
    base = {"method": "grpo", "data": {"path": "x.jsonl"}}
    assert load_config(base).rollout.cuda_graphs == "auto"
    assert load_config(base, ["rollout.cuda_graphs=false"]).rollout.cuda_graphs is False
    with pytest.raises(ConfigError, match="rollout.cuda_graphs"):
        load_config(base, ["rollout.cuda_graphs=sometimes"])
    with pytest.raises(ValueError, match="cuda_graphs"):
        HFGenerator(tiny, tok, cuda_graphs="yes")
    prompts = prompts_of(tok, QUESTIONS[:2])
    params = SamplingParams(temperature=0, max_new_tokens=5)
    auto = HFGenerator(tiny, tok, cuda_graphs="auto")
    auto.generate(prompts, params)
    assert auto.last_stats["decode"] == "eager"  # no GPU: auto is off, silently
    with caplog.at_level(logging.WARNING, logger="trainer.rollout.hf"):
        forced = HFGenerator(tiny, tok, cuda_graphs=True)
        assert_same(HFGenerator(tiny, tok).generate(prompts, params), forced.generate(prompts, params))
    assert forced.last_stats["decode"] == "eager"
    assert "CUDA graphs need a GPU" in caplog.text


def test_unsupported_models_stay_on_the_eager_loop(tiny, tok, caplog):
    assert unsupported_reason(tiny) is None
    tiny.config._attn_implementation = "flash_attention_2"
    assert "flash_attention_2" in unsupported_reason(tiny)
    tiny.config._attn_implementation = "sdpa"
    tiny.config.rope_parameters = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
    assert unsupported_reason(tiny) == "rope type 'dynamic'"
    tiny.config.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
    tiny.config.sliding_window = 16
    assert unsupported_reason(tiny) == "sliding-window attention"
    prompts = prompts_of(tok, QUESTIONS[:2])
    with caplog.at_level(logging.WARNING, logger="trainer.rollout.hf"):
        gen = HFGenerator(tiny, tok, static_cache=True)
        gen.generate(prompts, SamplingParams(temperature=0, max_new_tokens=4))
    assert gen.last_stats["decode"] == "eager" and "sliding-window" in caplog.text


def test_eager_attention_kernel_uses_an_additive_mask(tok):
    model = make_tiny(tok, attn="eager")
    assert model.config._attn_implementation == "eager"
    prompts = prompts_of(tok, QUESTIONS[:4])
    eager, static, gen = both(model, tok, prompts, SamplingParams(temperature=0, max_new_tokens=12))
    assert_same(eager, static)
    assert gen._static.storages[0].mask.dtype == torch.float32


def test_packed_gqa_attention_equals_repeated_kv_sdpa():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from trainer.rollout.static_decode import _packed_gqa_sdpa

    class Attn(torch.nn.Module):
        num_key_value_groups = 4
        is_causal = True

    torch.manual_seed(0)
    b, hq, hkv, s, d = 3, 8, 2, 10, 16
    q, k, v = torch.randn(b, hq, 1, d), torch.randn(b, hkv, s, d), torch.randn(b, hkv, s, d)
    mask = torch.rand(b, 1, 1, s) > 0.4
    mask[:, :, :, -1] = True
    module = Attn().eval()
    ref, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.25)  # repeats K/V per query head
    out, _ = _packed_gqa_sdpa(module, q, k, v, mask, scaling=0.25)
    assert out.shape == ref.shape == (b, 1, hq, d)
    assert torch.allclose(out, ref, atol=1e-6)


def test_the_static_step_uses_the_packed_attention_only_while_it_runs(tiny, tok):
    gen = HFGenerator(tiny, tok, static_cache=True)
    gen.generate(prompts_of(tok, QUESTIONS[:2]), SamplingParams(temperature=0, max_new_tokens=3))
    assert gen._static.pack_gqa and tiny.config._attn_implementation == "sdpa"


def test_storages_over_the_memory_limit_are_freed_after_the_call(tiny, tok, monkeypatch):
    from trainer.rollout import static_decode

    gen = HFGenerator(tiny, tok, static_cache=True)
    prompts = prompts_of(tok, QUESTIONS[:3])
    params = SamplingParams(temperature=0, max_new_tokens=6)
    first = gen.generate(prompts, params)
    assert len(gen._static.storages) == 1  # small: kept for the next call
    monkeypatch.setattr(static_decode, "_KEEP_BYTES", 0)
    assert_same(first, gen.generate(prompts, params))
    assert gen._static.storages == [] and gen.last_stats["decode"] == "static"
    assert_same(first, gen.generate(prompts, params))  # a fresh storage next time


def test_the_runner_passes_rollout_cuda_graphs_to_the_generator(tiny_config, tok):
    from trainer.models import load_policy
    from trainer.runner import make_generator

    for value, expected in (("auto", "auto"), ("true", True), ("false", False)):
        cfg = load_config(tiny_config(), [f"rollout.cuda_graphs={value}"])
        gen = make_generator(cfg, load_policy(cfg))
        assert gen.inner.cuda_graphs == expected
    prompts = prompts_of(tok, QUESTIONS[:2])
    gen.generate(prompts, SamplingParams(temperature=0, max_new_tokens=3))
    assert gen.inner.last_stats["decode"] == "eager"


@pytest.mark.parametrize("kind", ["qwen2", "qwen3", "mistral"])
def test_other_auto_architectures_match_the_eager_loop(tok, kind):
    from transformers import AutoConfig, AutoModelForCausalLM

    from trainer.rollout.static_decode import AUTO_MODEL_TYPES

    extra = {"sliding_window": None} if kind == "mistral" else {}
    config = AutoConfig.for_model(kind, vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, bos_token_id=tok.bos_token_id,
                                  eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, initializer_range=0.2,
                                  **extra)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    assert kind in AUTO_MODEL_TYPES and unsupported_reason(model) is None
    eager, static, gen = both(model, tok, prompts_of(tok, QUESTIONS[:4]), SamplingParams(temperature=0, max_new_tokens=10))
    assert_same(eager, static)
    assert gen.last_stats["decode"] == "static"


def test_a_model_whose_static_step_fails_falls_back_to_the_eager_loop(tok, caplog):
    """Bloom builds ALiBi from a 2D mask, so the static step (a 4D mask) raises inside the
    model: the call warns once and decodes with the eager loop, and so do later calls."""
    from transformers import BloomConfig, BloomForCausalLM

    config = BloomConfig(vocab_size=len(tok), hidden_size=32, n_layer=2, n_head=4, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = BloomForCausalLM(config).eval()
    assert unsupported_reason(model) is None  # nothing in the config says so: only running it tells
    prompts = prompts_of(tok, QUESTIONS[:3])
    params = SamplingParams(temperature=0, max_new_tokens=6)
    with caplog.at_level(logging.WARNING, logger="trainer.rollout.hf"):
        eager, static, gen = both(model, tok, prompts, params)
        assert_same(eager, static)
        assert gen.last_stats["decode"] == "eager" and gen._static_off and gen._static is None
        assert_same(eager, gen.generate(prompts, params))
    assert caplog.text.count("decoding is off") == 1
