"""Truncated importance sampling between the rollout engine's log-probs and the trainer's
(``train.rollout_is_cap``): the formula by hand, and the update's gradient scaled by the weights."""
import math

import pytest
import torch

from tests.trainer.test_update import _cfg, _grads_after_update, _group, _reference_logp
from trainer.config import ConfigError, load_config
from trainer.models import load_policy
from trainer.update import Sample, rollout_is


def test_rollout_is_by_hand():
    logp = torch.tensor([[-1.0, -2.0, -0.5]])
    rollout = torch.tensor([[-1.5, -1.0, -3.5]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    ref, adv, parts = rollout_is(logp, rollout, torch.tensor([2.0]), mask, cap=2.0)
    # w = min(exp(logp - rollout), 2) = [e^0.5 = 1.6487, e^-1 = 0.3679, masked 0]; advantage 2 * w
    assert adv[0].tolist() == pytest.approx([2 * math.exp(0.5), 2 * math.exp(-1.0), 0.0], rel=1e-6)
    assert torch.equal(ref, logp) and not ref.requires_grad
    assert parts["is_weight_sum"] == pytest.approx(math.exp(0.5) + math.exp(-1.0), rel=1e-6)
    assert parts["is_truncated_sum"] == 0
    # k1 of KL(rollout || trainer) over the 2 trained tokens: (-1.5 + 1) + (-1 + 2) = 0.5
    assert parts["rollout_kl_sum"] == pytest.approx(0.5)
    _, adv, parts = rollout_is(logp, rollout, torch.tensor([2.0]), mask, cap=1.5)
    assert adv[0, 0].item() == pytest.approx(3.0) and parts["is_truncated_sum"] == 1  # e^0.5 capped at 1.5


def _with_rollout_logprobs(samples, logp, shift):
    """The samples with rollout log-probs = the trainer's + shift (an engine that is off by a constant)."""
    out = []
    for b, s in enumerate(samples):
        n = len(s.completion_ids)
        out.append(Sample(s.prompt_ids, s.completion_ids, s.loss_mask, (logp[b, :n] + shift).tolist(),
                          advantage=s.advantage, role=s.role))
    return out


@pytest.mark.parametrize("cap, expected", [(10.0, 2.0), (1.5, 1.5)])
def test_the_update_gradient_is_scaled_by_the_truncated_weight(tiny_config, cap, expected):
    samples = _group() + _group(seed=1, prompt_len=9)
    plain_cfg = _cfg(tiny_config, micro_batch_size=2)
    with torch.no_grad():
        logp = _reference_logp(load_policy(plain_cfg).base_model(), samples)  # the trainer's own log-probs
    # plain path, rollout log-probs == the trainer's: ratio 1, gradient -A grad(logp) / tokens
    plain, _ = _grads_after_update(plain_cfg, _with_rollout_logprobs(samples, logp, 0.0))
    # the rollout engine gave every token half the trainer's probability: w = min(2, cap)
    is_cfg = _cfg(tiny_config, micro_batch_size=2, rollout_is_cap=cap)
    weighted, metrics = _grads_after_update(is_cfg, _with_rollout_logprobs(samples, logp, -math.log(2.0)))
    for g, p in zip(weighted, plain):
        torch.testing.assert_close(g, expected * p, atol=1e-6, rtol=1e-4)
    m = metrics["solver"]
    assert m["is_weight"] == pytest.approx(expected, rel=1e-4)
    assert m["is_truncated"] == pytest.approx(1.0 if cap < 2 else 0.0)
    assert m["rollout_kl"] == pytest.approx(-math.log(2.0), rel=1e-4)
    assert m["ratio_max"] == pytest.approx(2.0, rel=1e-4) == m["ratio_min"]  # pi_trainer / pi_rollout, untruncated


def test_the_cap_must_not_be_negative(tiny_config):
    with pytest.raises(ConfigError, match="rollout_is_cap"):
        load_config(tiny_config(train={"device": "cpu", "rollout_is_cap": -1}))
