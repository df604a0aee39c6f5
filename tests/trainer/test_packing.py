"""Sequence packing: packed log-probs and gradients equal the padded forward's (CPU)."""
from __future__ import annotations

import pytest
import torch

from trainer import packing


@pytest.fixture
def tiny_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="sdpa")
    return model.eval()


def padded_completion_logprobs(model, prompts, completions, temperature=1.0):
    """The reference: right-padded batch with an attention mask, full logits."""
    seqs = [p + c for p, c in zip(prompts, completions)]
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    logits = model(input_ids=ids, attention_mask=mask).logits.float() / temperature  # [B, L, V]
    logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # [B, L-1]
    return [logp[i, len(p) - 1 : len(p) - 1 + len(c)] for i, (p, c) in enumerate(zip(prompts, completions))]


def ragged_batch(seed=0, n=5, vocab=49152):
    g = torch.Generator().manual_seed(seed)
    prompts, completions = [], []
    for _ in range(n):
        lp, lc = torch.randint(1, 12, (2,), generator=g).tolist()
        prompts.append(torch.randint(0, vocab, (lp,), generator=g).tolist())
        completions.append(torch.randint(0, vocab, (lc,), generator=g).tolist())
    return prompts, completions


def test_plan_bins_first_fit_decreasing():
    # 5 and 2 fill one bin of 7; 4 and 3 the other
    assert packing.plan_bins([5, 3, 4, 2], 7) == [[0, 3], [1, 2]]
    # a sequence over the budget gets its own bin, never cut
    assert packing.plan_bins([10, 1, 1], 4) == [[0], [1, 2]]
    bins = packing.plan_bins([3] * 7, 9)
    assert sorted(i for b in bins for i in b) == list(range(7)) and all(len(b) <= 3 for b in bins)
    with pytest.raises(ValueError):
        packing.plan_bins([1], 0)


def test_pack_positions_restart_and_boundaries():
    b = packing.pack([[7, 8, 9], [1], [4, 5]])
    assert b.input_ids.tolist() == [[7, 8, 9, 1, 4, 5]]
    assert b.position_ids.tolist() == [[0, 1, 2, 0, 0, 1]]
    assert b.cu_seqlens.tolist() == [0, 3, 4, 6] and b.cu_seqlens.dtype == torch.int32
    assert b.max_len == 3 and b.n_tokens == 6
    assert [t.tolist() for t in b.split(torch.arange(6))] == [[0, 1, 2], [3], [4, 5]]
    with pytest.raises(ValueError):
        packing.pack([[1], []])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_packed_logprobs_equal_padded(tiny_model, temperature):
    prompts, completions = ragged_batch(seed=1)
    with torch.no_grad():
        ref = padded_completion_logprobs(tiny_model, prompts, completions, temperature)
        assert packing.enable_varlen_attention(tiny_model) == packing.VARLEN_ATTN
        got = packing.completion_logprobs(tiny_model, prompts, completions, temperature, chunk=7)
    for r, g in zip(ref, got):
        assert r.shape == g.shape
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5)


def test_varlen_model_still_matches_sdpa_for_padded_calls(tiny_model):
    """Switching to selfplay_varlen must not change ordinary (padded, masked) forwards."""
    prompts, completions = ragged_batch(seed=2)
    with torch.no_grad():
        ref = padded_completion_logprobs(tiny_model, prompts, completions)
        packing.enable_varlen_attention(tiny_model)
        again = padded_completion_logprobs(tiny_model, prompts, completions)
    for r, a in zip(ref, again):
        torch.testing.assert_close(a, r, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_packed_gradients_equal_padded(tiny_model, checkpointing):
    prompts, completions = ragged_batch(seed=3)
    weights = [torch.randn(len(c), generator=torch.Generator().manual_seed(i)) for i, c in enumerate(completions)]

    def grads(fn):
        tiny_model.zero_grad(set_to_none=True)
        lps = fn()
        loss = sum((w * lp).sum() for w, lp in zip(weights, lps))
        loss.backward()
        return {n: p.grad.clone() for n, p in tiny_model.named_parameters() if p.grad is not None}

    tiny_model.train()
    ref = grads(lambda: padded_completion_logprobs(tiny_model, prompts, completions))
    packing.enable_varlen_attention(tiny_model)
    if checkpointing:
        tiny_model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    got = grads(lambda: packing.completion_logprobs(tiny_model, prompts, completions, chunk=5))
    assert ref.keys() == got.keys()
    for name in ref:
        torch.testing.assert_close(got[name], ref[name], atol=1e-5, rtol=1e-4, msg=name)


def test_packed_row_does_not_attend_across_sequences(tiny_model):
    """Changing sequence A must not move sequence B's log-probs when both share a row."""
    packing.enable_varlen_attention(tiny_model)
    a1, a2, b = [5, 6, 7, 8], [900, 901, 902, 903], [11, 12, 13]
    with torch.no_grad():
        one = packing.completion_logprobs(tiny_model, [a1[:1], b[:1]], [a1[1:], b[1:]])
        two = packing.completion_logprobs(tiny_model, [a2[:1], b[:1]], [a2[1:], b[1:]])
    torch.testing.assert_close(one[1], two[1], atol=0, rtol=0)
    assert not torch.allclose(one[0], two[0])


def test_update_pass_with_packing_gives_the_padded_gradient(tiny_config):
    """train.packing: the shared update pass packs the micro-batches (token-budget bins) and
    gets the same loss and gradient as the padded path."""
    from trainer.config import load_config
    from trainer.engine import make_engine
    from trainer.models import load_policy
    from trainer.update import Sample, policy_update

    prompts, completions = ragged_batch(seed=4, n=7)
    samples = [Sample(p, c, [1] * len(c), [-5.0] * len(c), advantage=(-1.0) ** i * (i + 1) / 7, role="solver")
               for i, (p, c) in enumerate(zip(prompts, completions))]
    samples[2].loss_mask[0] = 0  # a masked (tool) token inside a completion

    def grads(**train):
        cfg = load_config(tiny_config(train={"device": "cpu", "share_prompt_prefix": False, **train}))
        policy = load_policy(cfg)
        engine = make_engine(cfg, policy)
        engine.step = lambda: 0.0  # keep the gradients (no optimizer step)
        metrics = policy_update(policy, engine, samples, cfg)["solver"]
        return [p.grad.clone() for p in policy.trainable_parameters()], metrics

    ref, m_ref = grads(micro_batch_size=3)
    got, m_got = grads(packing=True, micro_batch_tokens=24)
    assert m_got["tokens"] == m_ref["tokens"]
    assert m_got["loss"] == pytest.approx(m_ref["loss"], rel=1e-4)
    for a, b in zip(ref, got):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-4)


def test_packed_attention_under_autocast_runs_in_autocast_precision(monkeypatch):
    """float32 weights under bf16 autocast: rotary embeddings hand attention float32 q/k, and the packed
    path took its slow exact loop in float32 (17 s GRPO updates of Qwen2.5-0.5B on an H100). It now casts
    q/k/v to autocast's dtype first, as autocast does for scaled_dot_product_attention."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, 10, 8, generator=g) for h in (4, 2, 2))  # [B, H, T, D], GQA 4/2
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    seen = []  # the dtype the flash-or-loop decision sees (flash takes bf16/fp16 only)
    decide = packing._use_flash
    monkeypatch.setattr(packing, "_use_flash", lambda query: seen.append(query.dtype) or decide(query))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = packing.varlen_attention_forward(None, q, k, v, None, cu_seq_lens_q=cu, max_length_q=6)
    assert seen == [torch.bfloat16] and out.dtype == torch.bfloat16 and out.shape == (1, 10, 4, 8)
    plain, _ = packing.varlen_attention_forward(None, q, k, v, None, cu_seq_lens_q=cu, max_length_q=6)
    assert plain.dtype == torch.float32  # no autocast: untouched
    torch.testing.assert_close(out.float(), plain, atol=3e-2, rtol=3e-2)
