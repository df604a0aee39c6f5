"""PPO-clip loss, aggregations, KL estimators, entropy and token log-probs by hand."""

import math

import pytest
import torch

from trainer.algos.kl import KL_ESTIMATORS, get_kl, kl_k1, kl_k2, kl_k3
from trainer.algos.losses import (
    AGGREGATIONS,
    aggregate,
    entropy,
    masked_mean,
    policy_loss,
    token_logprobs,
)

LN = math.log


def _logps(ratios):
    """logp / old_logp pair [1, L] whose exp-difference gives the wanted ratios."""
    old = torch.full((1, len(ratios)), -1.0, dtype=torch.float64)
    logp = (old + torch.log(torch.tensor([ratios], dtype=torch.float64))).requires_grad_()
    return logp, old


# ---------------------------------------------------------------- PPO-clip


def test_it_clips_the_ratio_from_above_for_positive_advantages():
    # ratios [1, 1.5, 0.5, 1.1], A = +1, clip 0.2/0.2 -> clip(r) = [1, 1.2, 0.8, 1.1]
    # min(r*A, clip(r)*A) = [1, 1.2, 0.5, 1.1]  (0.5 stays: pessimistic bound)
    # loss = -(1 + 1.2 + 0.5 + 1.1) / 4 = -0.95
    logp, old = _logps([1.0, 1.5, 0.5, 1.1])
    loss, stats = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 4))
    assert loss.item() == pytest.approx(-0.95)
    assert stats["clip_frac"] == pytest.approx(0.25)  # only r = 1.5 is clipped
    assert stats["clip_frac_high"] == pytest.approx(0.25)
    assert stats["clip_frac_low"] == 0.0
    assert stats["ratio_mean"] == pytest.approx((1 + 1.5 + 0.5 + 1.1) / 4)  # 1.025
    assert stats["ratio_max"] == pytest.approx(1.5)
    assert stats["ratio_min"] == pytest.approx(0.5)


def test_it_clips_the_ratio_from_below_for_negative_advantages():
    # A = -1: -min(-r, -clip(r)) = max(r, clip(r)) = [1, 1.5, 0.8, 1.1]
    # loss = (1 + 1.5 + 0.8 + 1.1) / 4 = 1.1 ; r = 0.5 is clipped at the floor 0.8
    logp, old = _logps([1.0, 1.5, 0.5, 1.1])
    loss, stats = policy_loss(logp, old, torch.tensor([-1.0]), torch.ones(1, 4))
    assert loss.item() == pytest.approx(1.1)
    assert stats["clip_frac_low"] == pytest.approx(0.25)
    assert stats["clip_frac_high"] == 0.0


def test_it_uses_separate_low_and_high_clip_ranges():
    # SSP's clip_high 0.285: r = 1.5, A = +1 -> min(1.5, 1.285) = 1.285
    # clip_low 0.1: r = 0.5, A = -1 -> max(0.5, 0.9) = 0.9
    logp, old = _logps([1.5])
    loss, _ = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 1), clip_low=0.1, clip_high=0.285)
    assert loss.item() == pytest.approx(-1.285)
    logp, old = _logps([0.5])
    loss, _ = policy_loss(logp, old, torch.tensor([-1.0]), torch.ones(1, 1), clip_low=0.1, clip_high=0.285)
    assert loss.item() == pytest.approx(0.9)


def test_it_stops_the_gradient_of_clipped_tokens_only():
    # d loss / d logp_t = -A * r_t / n for unclipped tokens, 0 for clipped ones.
    # ratios [1, 1.5, 0.5, 1.1], A = +1, n = 4 -> [-0.25, 0, -0.125, -0.275]
    logp, old = _logps([1.0, 1.5, 0.5, 1.1])
    loss, _ = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 4))
    loss.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.25, 0.0, -0.125, -0.275]], dtype=torch.float64))


def test_it_ignores_masked_tokens():
    # mask drops r = 0.5: min(...) = [1, 1.2, 1.1] -> loss = -3.3 / 3 = -1.1
    logp, old = _logps([1.0, 1.5, 0.5, 1.1])
    loss, stats = policy_loss(logp, old, torch.tensor([1.0]), torch.tensor([[1, 1, 0, 1]]))
    assert loss.item() == pytest.approx(-1.1)
    assert stats["n_tokens"] == 3
    assert stats["clip_frac"] == pytest.approx(1 / 3)


def test_it_accepts_per_token_advantages():
    logp, old = _logps([1.0, 1.0])
    loss, _ = policy_loss(logp, old, torch.tensor([[2.0, -1.0]]), torch.ones(1, 2))
    assert loss.item() == pytest.approx(-(2.0 - 1.0) / 2)


def test_it_rejects_shape_mismatches():
    with pytest.raises(ValueError, match="same"):
        policy_loss(torch.zeros(2, 3), torch.zeros(2, 4), torch.zeros(2), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"\[B\] or \[B, L\]"):
        policy_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3, 1), torch.ones(2, 3))


# ---------------------------------------------------------------- aggregation


def _unit_ratio_batch():
    # ratio 1 everywhere -> per-token loss = -A.  A = [1, -2]
    # seq 1 mask [1, 1, 1] -> token sum -3 ; seq 2 mask [1, 0, 0] -> token sum +2
    logp = torch.zeros(2, 3)
    return logp, logp.clone(), torch.tensor([1.0, -2.0]), torch.tensor([[1, 1, 1], [1, 0, 0]])


def test_it_averages_over_all_unmasked_tokens_with_token_mean():
    # (-3 + 2) / 4 tokens = -0.25
    loss, _ = policy_loss(*_unit_ratio_batch(), agg="token_mean")
    assert loss.item() == pytest.approx(-0.25)


def test_it_sums_per_sequence_over_a_constant_for_seq_sum():
    # Dr.GRPO: (1/B) sum_i (1/L_max) sum_t loss_it
    # max_len 4: (-3/4 + 2/4) / 2 = -0.125 ; default L = 3: (-3/3 + 2/3) / 2 = -1/6
    loss, _ = policy_loss(*_unit_ratio_batch(), agg="seq_sum", max_len=4)
    assert loss.item() == pytest.approx(-0.125)
    loss, _ = policy_loss(*_unit_ratio_batch(), agg="seq_sum")
    assert loss.item() == pytest.approx(-1 / 6)


def test_it_lets_the_caller_override_the_denominator():
    # gradient accumulation: the whole batch has 10 tokens -> (-3 + 2) / 10
    loss, _ = policy_loss(*_unit_ratio_batch(), agg="token_mean", denom=10.0)
    assert loss.item() == pytest.approx(-0.1)


def test_it_names_the_aggregations_and_rejects_unknown_ones():
    assert set(AGGREGATIONS) == {"token_mean", "seq_sum"}
    with pytest.raises(ValueError, match="choose one of"):
        aggregate(torch.zeros(1, 1), torch.ones(1, 1), agg="seq_mean")


def test_it_returns_zero_for_an_empty_mask():
    assert float(masked_mean(torch.ones(2, 2), torch.zeros(2, 2))) == 0.0
    loss, stats = policy_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1), torch.zeros(1, 2))
    assert loss.item() == 0.0 and stats["n_tokens"] == 0


# ---------------------------------------------------------------- KL estimators


def test_it_computes_k1_k2_k3_by_hand():
    # policy p = 0.5, reference q = 0.25 on the sampled token; x = ln(q/p) = ln 0.5 = -0.693147
    # k1 = -x = 0.693147 ; k2 = x^2/2 = 0.240227 ; k3 = e^x - x - 1 = 0.5 + 0.693147 - 1 = 0.193147
    logp, ref = torch.tensor([[LN(0.5)]]), torch.tensor([[LN(0.25)]])
    assert float(kl_k1(logp, ref)) == pytest.approx(0.693147, abs=1e-6)
    assert float(kl_k2(logp, ref)) == pytest.approx(0.240227, abs=1e-6)
    assert float(kl_k3(logp, ref)) == pytest.approx(0.193147, abs=1e-6)


def test_it_gives_zero_kl_for_identical_policies_and_nonnegative_k3():
    x = torch.randn(3, 5)
    assert torch.all(kl_k3(x, x) == 0) and torch.all(kl_k1(x, x) == 0)
    assert torch.all(kl_k3(x, torch.randn(3, 5)) >= 0)


def test_k1_and_k3_are_unbiased_estimates_of_the_true_kl():
    # KL(p || q) for p = [0.7, 0.2, 0.1], q = [0.4, 0.4, 0.2]
    # = 0.7 ln(7/4) + 0.2 ln(1/2) + 0.1 ln(1/2) = 0.391731 - 0.138629 - 0.069315 = 0.183788
    gen = torch.Generator().manual_seed(0)
    p, q = torch.tensor([0.7, 0.2, 0.1]), torch.tensor([0.4, 0.4, 0.2])
    tok = torch.multinomial(p, 200_000, replacement=True, generator=gen)
    logp, ref = p.log()[tok], q.log()[tok]
    assert float(kl_k1(logp, ref).mean()) == pytest.approx(0.183788, abs=5e-3)
    assert float(kl_k3(logp, ref).mean()) == pytest.approx(0.183788, abs=5e-3)


def test_it_looks_kl_estimators_up_by_name():
    assert set(KL_ESTIMATORS) == {"k1", "k2", "k3"}
    assert get_kl("k3") is kl_k3
    with pytest.raises(ValueError, match="choose one of"):
        get_kl("k4")


# ---------------------------------------------------------------- entropy / log-probs


def test_it_computes_entropy_by_hand():
    # uniform over 4 -> ln 4 = 1.386294
    # p = [0.25, 0.75] -> -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.346574 + 0.215762 = 0.562335
    # (-inf logits = masked vocabulary entries with p = 0, and no nan)
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [LN(1), LN(3), -math.inf, -math.inf]]])
    torch.testing.assert_close(entropy(logits), torch.tensor([[1.386294, 0.562335]]), atol=1e-5, rtol=0)


def test_it_chunks_entropy_without_changing_it():
    torch.manual_seed(0)
    logits = torch.randn(3, 7, 11)
    full = -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1)
    torch.testing.assert_close(entropy(logits, chunk_size=2), full, atol=1e-5, rtol=0)


def test_it_gathers_token_logprobs_by_hand():
    # logits [ln 1, ln 3] -> p = [0.25, 0.75]; ids [1, 0] -> [ln 0.75, ln 0.25]
    logits = torch.tensor([[[LN(1), LN(3)], [LN(1), LN(3)]]])
    out = token_logprobs(logits, torch.tensor([[1, 0]]))
    torch.testing.assert_close(out, torch.tensor([[LN(0.75), LN(0.25)]]), atol=1e-6, rtol=0)


def test_it_matches_log_softmax_in_chunks_and_in_bfloat16():
    torch.manual_seed(0)
    logits = torch.randn(2, 9, 13)
    ids = torch.randint(0, 13, (2, 9))
    ref = logits.log_softmax(-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(token_logprobs(logits, ids, chunk_size=4), ref, atol=1e-5, rtol=0)
    half = token_logprobs(logits.bfloat16(), ids)
    assert half.dtype == torch.float32
    torch.testing.assert_close(half, ref, atol=5e-2, rtol=0)


def test_token_logprobs_carry_gradients():
    logits = torch.randn(1, 3, 5, requires_grad=True)
    token_logprobs(logits, torch.tensor([[0, 1, 2]])).sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()


def test_it_rejects_misaligned_ids():
    with pytest.raises(ValueError, match="ids shape"):
        token_logprobs(torch.zeros(1, 3, 5), torch.zeros(1, 4, dtype=torch.long))


def test_logprobs_and_entropy_equal_the_chunked_pieces_with_temperatures_and_gradients():
    from trainer.algos.losses import entropy, logprobs_and_entropy, token_logprobs

    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(6, 50, generator=g) * 3).to(torch.bfloat16).requires_grad_(True)  # [N, V]
    logits_ref = logits.detach().clone().requires_grad_(True)
    ids = torch.randint(0, 50, (6,), generator=g)
    temp = torch.tensor([1.0, 1.0, 0.7, 0.7, 1.3, 1.0])
    logp, ent = logprobs_and_entropy(logits, ids, temp)
    scaled = logits_ref.float() / temp[:, None]
    want_logp = token_logprobs(scaled, ids, chunk_size=4)
    with torch.no_grad():
        want_ent = entropy(scaled, chunk_size=4)
    torch.testing.assert_close(logp, want_logp)
    torch.testing.assert_close(ent, want_ent)
    assert logp.dtype == ent.dtype == torch.float32 and not ent.requires_grad
    w = torch.randn(6, generator=g)
    (logp * w).sum().backward()
    (want_logp * w).sum().backward()
    torch.testing.assert_close(logits.grad, logits_ref.grad)
    # entropy with a gradient (train.entropy_coef > 0); a masked (-inf) vocabulary entry counts as p = 0
    masked = torch.tensor([[0.0, float("-inf"), 0.0]])
    logp, ent = logprobs_and_entropy(masked.requires_grad_(True), torch.tensor([0]), torch.ones(1), entropy_grad=True)
    assert ent.requires_grad and ent.item() == pytest.approx(math.log(2.0)) and logp.item() == pytest.approx(-math.log(2))
