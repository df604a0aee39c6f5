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


def _without_rollout_logprobs(samples):
    """The samples as a rollout engine that was not asked for log-probs leaves them (nan)."""
    return [Sample(s.prompt_ids, s.completion_ids, s.loss_mask, [float("nan")] * len(s.completion_ids),
                   advantage=s.advantage, role=s.role) for s in samples]


def test_the_trainer_reference_needs_no_rollout_logprobs(tiny_config):
    """train.old_logprobs: trainer takes the pre-update log-probs of the trainer itself as the PPO
    reference, so samples without rollout log-probs (nan) train exactly like samples whose rollout
    log-probs equal the trainer's (ratio 1), and entropy_sampled comes from the trainer."""
    samples = _group() + _group(seed=1, prompt_len=9)
    plain_cfg = _cfg(tiny_config, micro_batch_size=2)
    with torch.no_grad():
        logp = _reference_logp(load_policy(plain_cfg).base_model(), samples)
    exact, exact_metrics = _grads_after_update(plain_cfg, _with_rollout_logprobs(samples, logp, 0.0))
    trainer_cfg = _cfg(tiny_config, micro_batch_size=2, old_logprobs="trainer")
    assert trainer_cfg.trainer_reference and not trainer_cfg.rollout_logprobs
    grads, metrics = _grads_after_update(trainer_cfg, _without_rollout_logprobs(samples))
    for g, p in zip(grads, exact):
        torch.testing.assert_close(g, p, atol=1e-6, rtol=1e-4)
    m, e = metrics["solver"], exact_metrics["solver"]
    assert m["ratio_max"] == m["ratio_min"] == 1.0 and m["clip_frac"] == 0.0
    assert m["entropy_sampled"] == pytest.approx(e["entropy_sampled"], rel=1e-4) and m["entropy_sampled"] > 0
    # an engine off by a constant changes nothing here: its log-probs are not the reference
    shifted, _ = _grads_after_update(trainer_cfg, _with_rollout_logprobs(samples, logp, -1.0))
    for g, p in zip(shifted, exact):
        torch.testing.assert_close(g, p, atol=1e-6, rtol=1e-4)


def test_missing_rollout_logprobs_as_the_reference_are_refused(tiny_config):
    cfg = _cfg(tiny_config, micro_batch_size=2)  # hf backend, auto: the rollout's log-probs are the reference
    assert not cfg.trainer_reference and cfg.rollout_logprobs
    with pytest.raises(ValueError, match="train.old_logprobs"):
        _grads_after_update(cfg, _without_rollout_logprobs(_group()))


def test_which_logprobs_the_rollout_must_report(tiny_config):
    def cfg(**kw):
        rollout = {"backend": kw.pop("backend", "hf")}
        return load_config(tiny_config(rollout=rollout, train={"device": "cpu", **kw}))

    # (trainer_reference, rollout_logprobs)
    assert (cfg().trainer_reference, cfg().rollout_logprobs) == (False, True)  # hf: same kernels, free log-probs
    vllm = cfg(backend="vllm")
    assert (vllm.trainer_reference, vllm.rollout_logprobs) == (True, False)  # vLLM skips computing them
    capped = cfg(backend="vllm", rollout_is_cap=2.0)
    assert (capped.trainer_reference, capped.rollout_logprobs) == (True, True)  # IS weights need both
    forced = cfg(backend="vllm", old_logprobs="rollout")
    assert (forced.trainer_reference, forced.rollout_logprobs) == (False, True)
    assert cfg(old_logprobs="trainer").trainer_reference
    with pytest.raises(ConfigError, match="train.old_logprobs"):
        cfg(backend="vllm", old_logprobs="rollout", rollout_is_cap=2.0)


def test_methods_with_several_optimizer_steps_per_rollout_keep_the_rollout_reference(tiny_config):
    """ssp (Solver then Proposer, in mini-batches), score (Solver then Evaluator) and spice (128-trajectory
    mini-batches, spice.mini_batch_size) update several times on one rollout: auto keeps vLLM's log-probs there,
    and 'trainer' is refused."""
    def cfg(method, **train):
        return load_config(tiny_config(method, rollout={"backend": "vllm"}, train={"device": "cpu", **train}))

    for method in ("ssp", "score", "spice"):
        c = cfg(method)
        assert (c.trainer_reference, c.rollout_logprobs) == (False, True)
        with pytest.raises(ConfigError, match=f"train.old_logprobs.*method {method}"):
            cfg(method, old_logprobs="trainer")
    for method in ("scope", "piplay"):  # one update per rollout: the trainer's reference is exact
        assert cfg(method).trainer_reference and not cfg(method).rollout_logprobs


def test_after_an_optimizer_step_the_trainer_reference_is_not_the_sampling_weights(tiny_config):
    """Why: a second update on samples drawn before the first sees ratio 1 with the trainer's
    reference (no clipping against the weights that sampled); the rollout's reference sees the step."""
    from trainer.engine import make_engine
    from trainer.update import policy_update

    cfg = _cfg(tiny_config, micro_batch_size=2, lr=1e-2)
    policy = load_policy(cfg)
    first, second = _group(), _group(seed=1, prompt_len=9)
    with torch.no_grad():
        sampled = _reference_logp(policy.base_model(), second)  # the weights that drew both groups
    engine = make_engine(cfg, policy)
    policy_update(policy, engine, first, cfg)  # a real optimizer step
    engine.step = lambda: 0.0
    rollout = policy_update(policy, engine, _with_rollout_logprobs(second, sampled, 0.0), cfg)["solver"]
    trainer_cfg = _cfg(tiny_config, micro_batch_size=2, lr=1e-2, old_logprobs="trainer")
    trainer = policy_update(policy, engine, _without_rollout_logprobs(second), trainer_cfg)["solver"]
    assert trainer["ratio_max"] == trainer["ratio_min"] == 1.0
    assert rollout["ratio_max"] > 1.0 + 1e-3 or rollout["ratio_min"] < 1.0 - 1e-3


def test_missing_rollout_logprobs_are_refused_with_the_is_cap(tiny_config):
    """rollout_is_cap > 0 weights each token by exp(trainer - rollout): a nan rollout log-prob would
    make the loss (and every weight after the step) nan, so it is refused like a nan reference."""
    cfg = _cfg(tiny_config, micro_batch_size=2, rollout_is_cap=2.0)
    assert cfg.trainer_reference and cfg.rollout_logprobs
    with pytest.raises(ValueError, match="rollout_is_cap"):
        _grads_after_update(cfg, _without_rollout_logprobs(_group()))
