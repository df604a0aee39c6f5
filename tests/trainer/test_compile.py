"""model.compile (trainer/compile.py): the update pass through torch.compiled decoder layers
gives the eager numbers, parameter names do not change, rollouts still run (eagerly).

One test runs the real inductor backend (about 40 s of C++ compile on a cold cache); the others
set the private ``trainer.compile._BACKEND`` to "aot_eager": the same dynamo capture, dynamic
shapes and AOT autograd (forward/backward graphs), without inductor's code generation.
"""
from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from trainer import compile as tcompile
from trainer.config import load_config
from trainer.engine import make_engine
from trainer.models import load_policy
from trainer.rollout import HFGenerator, SamplingParams
from trainer.update import Sample, policy_update


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


@pytest.fixture
def aot_eager(monkeypatch):
    monkeypatch.setattr(tcompile, "_BACKEND", "aot_eager")


def graphs() -> int:
    return int(counters["stats"]["unique_graphs"])


def ragged_samples(n=6, seed=0):
    """Distinct prompts (no shared prefix), ragged lengths, a masked tool token."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        p, c = torch.randint(2, 12, (2,), generator=g).tolist()
        prompt = torch.randint(5, 900, (p,), generator=g).tolist()
        comp = torch.randint(5, 900, (c,), generator=g).tolist()
        out.append(Sample(prompt, comp, [1] * c, [-6.0] * c, advantage=(-1.0) ** i * (i + 1) / n, role="solver"))
    out[1].loss_mask[0] = 0
    return out


def run_update(tiny_config, compile_, model=None, **train):
    """One policy_update with an optimizer step; (loss, trainable params before, after, policy)."""
    cfg = load_config(tiny_config(model={"lora": {"r": 0}, **(model or {}), "compile": compile_},
                                  train={"device": "cpu", "lr": 1e-2, "share_prompt_prefix": False,
                                         "micro_batch_size": 3, **train}))
    torch.manual_seed(0)  # the LoRA A matrices are drawn at load
    policy = load_policy(cfg)
    trainable = lambda: {n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad}  # noqa: E731
    before = trainable()
    metrics = policy_update(policy, make_engine(cfg, policy), ragged_samples(), cfg)["solver"]
    return metrics["loss"], before, trainable(), policy


def assert_same_update(eager, compiled, atol=1e-5):
    loss_e, before, after_e, policy_e = eager
    loss_c, _, after_c, policy_c = compiled
    assert loss_c == pytest.approx(loss_e, rel=1e-4, abs=1e-6)
    assert list(policy_c.model.state_dict()) == list(policy_e.model.state_dict())  # names unchanged
    assert list(after_c) == list(after_e)
    for name in after_e:
        torch.testing.assert_close(after_c[name], after_e[name], atol=atol, rtol=1e-4, msg=name)
    assert any(not torch.equal(after_c[n], p) for n, p in before.items())  # the step moved the weights


def test_inductor_update_equals_eager_and_keeps_names(tiny_config):
    eager = run_update(tiny_config, False)
    assert graphs() == 0
    compiled = run_update(tiny_config, True)
    assert tcompile.is_compiled(compiled[3].model) and not tcompile.is_compiled(eager[3].model)
    assert graphs() >= 1  # the compiled path really ran (padded micro-batches of 3 and 3 rows: one graph)
    assert_same_update(eager, compiled)


@pytest.mark.parametrize("variant", ["packing", "gradient_checkpointing", "lora"])
def test_compiled_update_variants_equal_eager(tiny_config, aot_eager, variant):
    model, train = {}, {}
    if variant == "packing":
        train = {"packing": True, "micro_batch_tokens": 24}
    elif variant == "gradient_checkpointing":
        model = {"gradient_checkpointing": True}
    else:
        model = {"lora": {"r": 4}}
    eager = run_update(tiny_config, False, model, **train)
    compiled = run_update(tiny_config, True, model, **train)
    assert graphs() >= 1
    assert_same_update(eager, compiled)
    if variant == "lora":  # peft names (base_layer, lora_A/B) are unchanged too
        assert any("lora_A" in n for n in compiled[2])


def test_rollouts_run_eagerly_on_a_compiled_policy(tiny_config, aot_eager, smollm2_tokenizer):
    """The HF decode loop and the static-cache decode give the uncompiled model's tokens and
    compile nothing, even with the model in training mode; the update then reproduces the
    rollout's log-probs through the compiled layers (every PPO ratio is 1)."""
    cfg = load_config(tiny_config(model={"compile": True}, train={"device": "cpu", "share_prompt_prefix": False}))
    policy = load_policy(cfg)
    plain = load_policy(load_config(tiny_config(train={"device": "cpu"})))
    policy.model.train()
    prompt = smollm2_tokenizer.encode("The capital of France is")
    params = SamplingParams(temperature=0, max_new_tokens=6)
    for static in (False, True):
        got = HFGenerator(policy.model, policy.tokenizer, static_cache=static).generate([prompt, prompt[:3]], params)
        want = HFGenerator(plain.model, plain.tokenizer, static_cache=static).generate([prompt, prompt[:3]], params)
        assert [o.completion_ids for o in got] == [o.completion_ids for o in want]
        assert [o.logprobs for o in got] == [pytest.approx(o.logprobs, abs=1e-5) for o in want]
    assert graphs() == 0

    torch.manual_seed(0)
    outs = HFGenerator(policy.model, policy.tokenizer).generate([prompt] * 3, SamplingParams(temperature=0.7, max_new_tokens=6))
    samples = [Sample(c.prompt_ids, c.completion_ids, [1] * len(c.completion_ids), c.logprobs, 1.0,
                      temperature=c.temperature) for c in outs]
    metrics = policy_update(policy, make_engine(cfg, policy), samples, cfg)["policy"]
    assert graphs() >= 1
    assert abs(metrics["ratio_max"] - 1) < 1e-4 and abs(metrics["ratio_min"] - 1) < 1e-4


def test_a_failing_compile_names_the_config_key(tiny_config, monkeypatch):
    def broken_backend(gm, example_inputs):
        raise RuntimeError("no C compiler found")

    monkeypatch.setattr(tcompile, "_BACKEND", broken_backend)
    with pytest.raises(tcompile.CompileFailed, match=r"model\.compile=false"):
        run_update(tiny_config, True)


def test_config_key_default_and_override(tiny_config):
    assert load_config(tiny_config()).model.compile is False
    assert load_config(tiny_config(), ["model.compile=true"]).model.compile is True
    zero3 = load_config(tiny_config(model={"compile": True}, train={"engine": "deepspeed", "zero_stage": 3}))
    with pytest.raises(tcompile.CompileFailed, match="zero_stage 2 or model.compile=false"):
        load_policy(zero3)


def test_only_training_forwards_without_a_kv_cache_run_the_compiled_layers(tiny_config, aot_eager):
    """The layer routing itself: the update tests above cannot tell it apart from eager layers, since
    with model.compile the update's loss terms are compiled too (a graph either way). A KV cache
    (the update's shared-prompt path, train.share_prompt_prefix with a group) keeps the layers eager."""
    cfg = load_config(tiny_config(model={"compile": True}, train={"device": "cpu"}))
    decoder = load_policy(cfg).model.get_decoder()
    ids = torch.randint(5, 900, (2, 7), generator=torch.Generator().manual_seed(0))
    decoder.eval()
    decoder(input_ids=ids, use_cache=False)
    decoder.train()
    with torch.no_grad():
        decoder(input_ids=ids, use_cache=False)
    decoder(input_ids=ids, use_cache=True)  # fills a DynamicCache
    assert graphs() == 0
    decoder(input_ids=ids, use_cache=False).last_hidden_state.sum().backward()
    assert graphs() >= 1


def test_groups_sharing_a_prompt_still_run_the_compiled_layers(tiny_config, aot_eager, monkeypatch):
    """train.share_prompt_prefix (the default) runs a group's prompt once into a KV cache, which keeps
    layers eager; with model.compile the update packs/pads the group instead, so every layer call of
    the update goes through the compiled code."""
    routed = []
    real = tcompile._wants_compiled
    monkeypatch.setattr(tcompile, "_wants_compiled", lambda layer, kwargs: routed.append(real(layer, kwargs)) or routed[-1])
    cfg = load_config(tiny_config(model={"compile": True}, train={"device": "cpu", "share_prompt_prefix": True}))
    policy = load_policy(cfg)
    prompt = [7, 8, 9, 10]
    group = [Sample(prompt, [11 + i, 12, 13], [1, 1, 1], [-6.0] * 3, advantage=a, role="solver")
             for i, a in enumerate((1.0, -1.0, 0.5, -0.5))]
    policy_update(policy, make_engine(cfg, policy), group, cfg)
    assert routed and all(routed), f"{routed.count(False)} of {len(routed)} layer calls ran eagerly"


def test_the_compiled_loss_terms_run_in_checkpointed_logits_chunks(tiny_config, aot_eager, monkeypatch):
    """memfix: the update's head + log-softmax run over chunks of tokens (checkpointed); the compiled
    loss terms inside each chunk give the eager update of the same chunks. (Chunked vs unchunked
    gradients agree to float rounding, tests/trainer/test_update.py; after one Adam step at lr 1e-2
    that rounding shows as ~5e-5 in a few weights whose gradient is ~0, so the comparison is chunk for chunk.)"""
    import trainer.update as update

    whole = run_update(tiny_config, False, {}, packing=True, micro_batch_tokens=24)
    vocab = whole[3].model.get_output_embeddings().weight.shape[0]
    monkeypatch.setattr(update, "LOGITS_CHUNK_BYTES", 3 * 4 * vocab)  # 3 tokens a chunk
    eager = run_update(tiny_config, False, {}, packing=True, micro_batch_tokens=24)
    chunked = run_update(tiny_config, True, {}, packing=True, micro_batch_tokens=24)
    assert graphs() >= 1
    assert_same_update(eager, chunked)
    assert chunked[0] == pytest.approx(whole[0], rel=1e-6)
