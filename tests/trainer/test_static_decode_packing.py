"""The static-cache / CUDA-graph decode path on a model whose attention ``train.packing`` switched to
trainer.packing's varlen implementation (sdpa for unpacked calls): it stays supported and decodes
the same tokens as the eager loop. On the GPU this was the reason the GRPO benchmark with
``train.packing`` fell back to the eager loop."""
from __future__ import annotations


from tests.trainer.test_static_decode import assert_same, both, make_tiny, prompts_of
from trainer.packing import VARLEN_ATTN, enable_varlen_attention
from trainer.rollout import SamplingParams
from trainer.rollout.static_decode import unsupported_reason


def test_varlen_attention_model_keeps_the_static_path(smollm2_tokenizer):
    tok = smollm2_tokenizer
    model = make_tiny(tok)
    assert enable_varlen_attention(model) == VARLEN_ATTN
    assert unsupported_reason(model) is None
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    eager, static, gen = both(model, tok, prompts_of(tok, ["Hi", "Why?", "Tell me a story."]), params)
    assert_same(eager, static)
    assert gen.last_stats.get("decode") != "eager"
    assert model.config._attn_implementation == VARLEN_ATTN  # restored after the step
