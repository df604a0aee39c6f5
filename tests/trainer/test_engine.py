"""TorchEngine: warmup schedule, accumulation, clipping, skipped non-finite steps, state round trip."""
import copy
import math

import pytest
import torch

from trainer.engine import Engine, TorchEngine, warmup_constant


def _params(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Linear(4, 3)


def _loss(model, x):
    return (model(x) ** 2).mean()


def test_warmup_then_constant():
    f = warmup_constant(3)
    # (s + 1) / (3 + 1) for s = 0, 1, 2, then 1
    assert [f(s) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    assert warmup_constant(0)(0) == 1.0
    model = _params()
    engine = TorchEngine(model.parameters(), lr=0.1, warmup_steps=1)
    assert isinstance(engine, Engine)
    assert engine.lr == pytest.approx(0.05)
    engine.backward(_loss(model, torch.ones(2, 4)))
    engine.step()
    assert engine.lr == pytest.approx(0.1)


def test_accumulated_micro_batches_equal_one_batch():
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
    a, b = _params(), _params()
    ea = TorchEngine(a.parameters(), lr=0.01, grad_clip=0)
    eb = TorchEngine(b.parameters(), lr=0.01, grad_clip=0)
    ea.backward(_loss(a, x))
    norm_a = ea.step()
    for half in (x[:4], x[4:]):
        eb.backward(_loss(b, half) / 2)  # each micro-batch carries its share
    norm_b = eb.step()
    assert norm_a == pytest.approx(norm_b, rel=1e-5)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q)
        assert q.grad is None  # step() zeroes the gradients


def test_clipping_returns_the_pre_clip_norm_and_bounds_the_update():
    model = _params()
    engine = TorchEngine(model.parameters(), lr=1.0, grad_clip=1e-3)
    engine.backward(1000 * _loss(model, torch.ones(2, 4)))
    grads_norm = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in model.parameters()))
    stepped = []  # the gradient norm the optimizer steps with (after clipping)
    engine.optimizer.register_step_pre_hook(lambda *_: stepped.append(
        math.sqrt(sum(float(p.grad.pow(2).sum()) for p in model.parameters()))))
    norm = engine.step()
    assert norm == pytest.approx(grads_norm, rel=1e-5) and norm > 1e-3
    assert stepped == [pytest.approx(1e-3, rel=1e-4)]  # the bound: clipped to grad_clip, 1e-3, before the update


def test_a_non_finite_gradient_skips_the_step():
    model = _params()
    before = [p.detach().clone() for p in model.parameters()]
    engine = TorchEngine(model.parameters(), lr=0.1)
    engine.backward(_loss(model, torch.full((2, 4), float("nan"))))
    assert math.isnan(engine.step())
    assert engine.skipped == 1 and engine.steps == 0
    for p, q in zip(before, model.parameters()):
        torch.testing.assert_close(p, q.detach())


def test_state_dict_round_trip_continues_identically():
    x = torch.randn(4, 4, generator=torch.Generator().manual_seed(2))
    a = _params()
    ea = TorchEngine(a.parameters(), lr=0.01, warmup_steps=2)
    ea.backward(_loss(a, x))
    ea.step()
    b = _params()
    b.load_state_dict(a.state_dict())
    eb = TorchEngine(b.parameters(), lr=0.01, warmup_steps=2)
    eb.load_state_dict(copy.deepcopy(ea.state_dict()))  # as if read back from disk
    assert eb.lr == ea.lr and eb.steps == 1
    for model, engine in ((a, ea), (b, eb)):
        engine.backward(_loss(model, x))
        engine.step()
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q)


def test_no_trainable_parameters_is_a_clear_error():
    frozen = torch.nn.Linear(2, 2).requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        TorchEngine(frozen.parameters(), lr=0.1)


# ---- the LoRA learning-rate rule ------------------------------------------------------------------

@pytest.mark.parametrize("policies", ["shared", "separate"])
def test_lora_adapters_train_at_the_auto_rate_unless_told_otherwise(tiny_config, policies):
    """model.lora.lr auto: train.lr x sqrt(3) x hidden_size / alpha (the tiny model: hidden 64, alpha 16 ->
    x 6.93), so a full fine-tune rate moves an adapter as far per step; train keeps train.lr; a number is used."""
    from trainer.config import load_config
    from trainer.engine import make_engine
    from trainer.models import load_policy

    def engine_lr(lora, method="scope" if policies == "separate" else "grpo"):
        extra = {"corpus": {"path": "unused.jsonl"}} if method == "scope" else {}
        cfg = load_config(tiny_config(method, model={"lora": {"r": 8, "alpha": 16.0, **lora}, "policies": policies},
                                      train={"lr": 1e-6}, **extra))
        engine = make_engine(cfg, load_policy(cfg))
        engines = list(engine.engines.values()) if policies == "separate" else [engine]
        rates = [e.optimizer.param_groups[0]["initial_lr"] for e in engines]  # the peak rate (before warmup)
        assert len(set(rates)) == 1
        return rates[0]

    assert engine_lr({}) == pytest.approx(1e-6 * math.sqrt(3) * 64 / 16)
    assert engine_lr({"lr": "train"}) == pytest.approx(1e-6)
    assert engine_lr({"lr": 3e-5}) == pytest.approx(3e-5)


def test_a_full_fine_tune_ignores_the_adapter_rate_and_a_bad_rate_is_refused(tiny_config):
    from trainer.config import ConfigError, load_config
    from trainer.engine import make_engine
    from trainer.models import load_policy

    cfg = load_config(tiny_config("grpo", model={"lora": {"r": 0, "lr": 5e-4}}, train={"lr": 1e-6}))
    assert make_engine(cfg, load_policy(cfg)).lr == pytest.approx(1e-6)
    with pytest.raises(ConfigError, match="model.lora.lr"):
        load_config(tiny_config("grpo", model={"lora": {"r": 8, "lr": -1.0}}))
