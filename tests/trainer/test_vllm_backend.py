"""The CPU-checkable parts of the vLLM backend (vLLM itself needs a GPU and is not installed here):
truncated importance weights, the weights pushed to vLLM, and the 'weights changed' signal."""
from __future__ import annotations

import math

import pytest
import torch

from trainer.algos.losses import truncated_is_weights
from trainer.rollout.vllm_backend import _param_versions, _weights_for_vllm


def test_truncated_is_weights_by_hand():
    trainer = torch.tensor([[-1.0, -2.0, -0.5]])
    rollout = torch.tensor([[-1.5, -2.0, -2.5]])
    w = truncated_is_weights(trainer, rollout, cap=2.0)
    # log ratios 0.5, 0, 2.0 -> e^0.5 = 1.6487, 1, e^2 = 7.39 capped at 2
    assert w[0].tolist() == pytest.approx([math.exp(0.5), 1.0, 2.0])
    assert not w.requires_grad
    with pytest.raises(ValueError):
        truncated_is_weights(trainer, rollout, cap=0)


def test_pushed_weights_are_bf16_full_and_skip_the_tied_head(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    pushed = dict(_weights_for_vllm(model))
    assert model.config.tie_word_embeddings and "lm_head.weight" not in pushed
    assert all(t.dtype == torch.bfloat16 for t in pushed.values())
    state = model.state_dict()
    assert set(pushed) == set(state) - {"lm_head.weight"}
    torch.testing.assert_close(pushed["model.embed_tokens.weight"].float(), state["model.embed_tokens.weight"],
                               atol=1e-2, rtol=1e-2)


def test_lora_is_merged_before_the_push(tiny_model_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    q_before = base.model.layers[0].self_attn.q_proj.weight.detach().clone()
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], init_lora_weights=False))
    pushed = dict(_weights_for_vllm(model))
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    delta = (layer.lora_B["default"].weight @ layer.lora_A["default"].weight) * layer.scaling["default"]  # [out, in]
    name = "model.layers.0.self_attn.q_proj.weight"
    assert name in pushed and not any("lora" in k for k in pushed)
    torch.testing.assert_close(pushed[name].float(), (q_before + delta).detach(), atol=2e-2, rtol=2e-2)
    assert not torch.allclose(pushed[name].float(), q_before, atol=1e-3)
    # the frozen base (judge / reference): the weights before the adapter, same names, adapter untouched
    frozen = dict(_weights_for_vllm(model, adapter=False))
    assert set(frozen) == set(pushed)
    torch.testing.assert_close(frozen[name].float(), q_before.to(torch.bfloat16).float())
    assert hasattr(model, "peft_config") and layer.lora_B["default"].weight.abs().sum() > 0
    torch.testing.assert_close(dict(_weights_for_vllm(model))[name], pushed[name])  # the policy is unchanged


def test_an_optimizer_step_marks_the_weights_changed(tiny_model_dir):
    """VLLMGenerator pushes when the parameters' in-place version counters moved."""
    from transformers import AutoModelForCausalLM

    from trainer.engine import TorchEngine

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    engine = TorchEngine(model.parameters(), lr=1e-3)
    before = _param_versions(model)
    with torch.no_grad():
        model(input_ids=torch.tensor([[1, 2, 3]]))
    assert _param_versions(model) == before  # a forward pass changes nothing
    x = torch.tensor([[5, 6, 7, 8]])
    engine.backward(model(input_ids=x, labels=x).loss)
    engine.step()
    assert _param_versions(model) != before


def test_flat_logprobs_give_the_sampled_tokens_logprob():
    from trainer.rollout.vllm_backend import flat_sampled_logprobs

    # position 0 holds only the sampled token; position 1 holds a top-1 entry first, then the sampled
    # token; position 2 lacks the sampled token (nan) — vLLM's FlatLogprobs layout as plain lists
    ids = [5, 7, 9]
    start, end = [0, 1, 3], [1, 3, 4]
    token_ids, logprobs = [5, 3, 7, 4], [-0.25, -0.1, -2.5, -0.7]
    got = flat_sampled_logprobs(ids, start, end, token_ids, logprobs)
    assert got[:2] == [-0.25, -2.5] and math.isnan(got[2])
    # fewer positions than ids (a truncated output) gives fewer values: the caller's length check fires
    assert flat_sampled_logprobs(ids, start[:2], end[:2], token_ids, logprobs) == [-0.25, -2.5]


def test_no_logprobs_are_asked_of_vllm_when_the_trainer_is_the_reference(tiny_model_dir):
    """SamplingParams.logprobs=False (train.old_logprobs: trainer): vLLM is asked for none, the
    completion carries nan per token; with logprobs the flat layout is read as before."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from trainer.rollout.types import SamplingParams
    from trainer.rollout.vllm_backend import VLLMGenerator, _completion_of

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    off, on = SamplingParams(logprobs=False), SamplingParams()
    assert VLLMGenerator._fast_output(off) == {"logprobs": None, "flat_logprobs": False, "detokenize": False}
    assert VLLMGenerator._fast_output(on) == {"logprobs": 0, "flat_logprobs": True, "detokenize": False}
    assert VLLMGenerator._fast_output(SamplingParams(stop=["</a>"]))["detokenize"] is True
    # what vLLM hands back for one row (a CompletionOutput's fields), with and without log-probs
    flat = SimpleNamespace(start_indices=[0, 1], end_indices=[1, 2], token_ids=[11, 12], logprobs=[-0.5, -1.5])
    row = dict(token_ids=[11, 12], stop_reason=None, finish_reason="length")
    c = _completion_of(SimpleNamespace(**row, logprobs=None), off, tok, eos_ids={2})
    assert c.completion_ids == [11, 12] and len(c.logprobs) == 2 and all(math.isnan(x) for x in c.logprobs)
    assert c.finish_reason == "length"
    assert _completion_of(SimpleNamespace(**row, logprobs=flat), on, tok, eos_ids={2}).logprobs == [-0.5, -1.5]
    with pytest.raises(RuntimeError, match="logprobs"):  # asked for log-probs and got none: loud
        _completion_of(SimpleNamespace(**row, logprobs=None), on, tok, eos_ids={2})
