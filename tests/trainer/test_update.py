"""The shared update pass on the tiny model: the fast paths give the numbers of the plain
padded computation, gradient accumulation is exact, metrics come per role."""
import pytest
import torch

from trainer.algos import policy_loss, token_logprobs
from trainer.config import load_config
from trainer.engine import make_engine
from trainer.models import load_policy
from trainer.rollout import HFGenerator, SamplingParams
from trainer.update import Sample, make_micro_batch, plan_micro_batches, policy_update, trained_logits


def _cfg(tiny_config, **train):
    return load_config(tiny_config(train={"device": "cpu", "lr": 1e-3, **train}))


def _group(prompt_len=6, lengths=(5, 4, 3, 2), seed=0, role="solver", advs=(1.0, -1.0, 0.5, -0.5)):
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(5, 900, (prompt_len,), generator=g).tolist()
    out = []
    for n, a in zip(lengths, advs):
        comp = torch.randint(5, 900, (n,), generator=g).tolist()
        out.append(Sample(prompt, comp, [1] * n, [-7.0] * n, advantage=a, role=role))
    return out


def _reference_logp(model, samples):
    """Plain padded forward of prompt+completion, full logits: [B, C] log-probs of the completions."""
    rows = [s.prompt_ids + s.completion_ids for s in samples]
    L = max(map(len, rows))
    ids = torch.tensor([r + [0] * (L - len(r)) for r in rows])
    logits = model(input_ids=ids).logits  # [B, L, V]
    C = max(len(s.completion_ids) for s in samples)
    out = torch.zeros(len(samples), C)
    for b, s in enumerate(samples):
        P, n = len(s.prompt_ids), len(s.completion_ids)
        lp = token_logprobs(logits[b, P - 1 : P - 1 + n], torch.tensor(s.completion_ids))
        out[b, :n] = lp
    return out


def test_shared_prefix_and_padded_paths_match_a_plain_forward(tiny_config):
    cfg = _cfg(tiny_config)
    policy = load_policy(cfg)
    lm = policy.base_model()
    samples = _group(lengths=(5, 4, 1))
    ref = _reference_logp(lm, samples)
    for shared in (True, False):
        mb = make_micro_batch(samples, 1.0, policy.device, shared)
        logits = trained_logits(lm, mb, policy.device)  # [N, V] on trained tokens only
        assert logits.shape[0] == int(mb.mask.sum()) == 10
        got = torch.zeros_like(ref)
        got[mb.mask] = token_logprobs(logits, mb.completion[mb.mask])
        torch.testing.assert_close(got, ref, atol=2e-5, rtol=1e-4)


def _grads_after_update(cfg, samples, policy=None):
    policy = policy or load_policy(cfg)
    engine = make_engine(cfg, policy)
    engine.step = lambda: 0.0  # keep the gradients to compare them (no optimizer step)
    metrics = policy_update(policy, engine, samples, cfg)
    return [p.grad.clone() for p in policy.trainable_parameters()], metrics


def test_update_gradient_equals_the_ppo_loss_of_a_plain_forward(tiny_config):
    cfg = _cfg(tiny_config, micro_batch_size=2)
    samples = _group() + _group(seed=1, prompt_len=9)
    grads, metrics = _grads_after_update(cfg, samples)

    policy = load_policy(cfg)
    lm = policy.base_model()
    logp = _reference_logp(lm, samples)  # [B, C]
    mask = torch.zeros_like(logp, dtype=torch.bool)
    old = torch.zeros_like(logp)
    for b, s in enumerate(samples):
        mask[b, : len(s.completion_ids)] = True
        old[b, : len(s.completion_ids)] = torch.tensor(s.old_logprobs)
    adv = torch.tensor([s.advantage for s in samples])
    loss, _ = policy_loss(logp, old, adv, mask, 0.2, 0.2, agg="token_mean")
    loss.backward()
    for g, p in zip(grads, policy.trainable_parameters()):
        torch.testing.assert_close(g, p.grad, atol=1e-6, rtol=1e-4)
    assert metrics["solver"]["tokens"] == 28 and metrics["solver"]["samples"] == 8
    assert metrics["solver"]["loss"] == pytest.approx(float(loss.detach()), rel=1e-4)


def test_micro_batching_prefix_sharing_and_zero_advantage_skipping_do_not_change_the_gradient(tiny_config):
    samples = _group(advs=(1.0, 0.0, -1.0, 0.0)) + _group(seed=3, lengths=(3,), advs=(2.0,))
    base, m_base = _grads_after_update(_cfg(tiny_config, micro_batch_size=8, share_prompt_prefix=False,
                                            skip_zero_advantage=False), samples)
    for variant in ({"micro_batch_size": 1}, {"share_prompt_prefix": True}, {"skip_zero_advantage": True}):
        grads, metrics = _grads_after_update(_cfg(tiny_config, **variant), samples)
        for a, b in zip(base, grads):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
        assert metrics["solver"]["loss"] == pytest.approx(m_base["solver"]["loss"], rel=1e-4, abs=1e-7)
    assert metrics["solver"]["skipped"] == 2


def test_metrics_come_per_role(tiny_config):
    cfg = _cfg(tiny_config)
    policy = load_policy(cfg)
    engine = make_engine(cfg, policy)
    samples = _group(role="challenger") + _group(seed=5, role="reasoner")
    metrics = policy_update(policy, engine, samples, cfg)
    assert set(metrics) == {"challenger", "reasoner"}
    for m in metrics.values():
        assert {"loss", "pg_loss", "clip_frac", "entropy", "grad_norm", "tokens", "lr"} <= set(m)
        assert m["grad_norm"] > 0 and m["entropy"] > 0
    assert plan_micro_batches(samples, 8, True)[0][1] is True  # a group runs its prompt once
    # every old log-prob is -7.0: the sampled-token entropy estimate is 7.0
    assert metrics["reasoner"]["entropy_sampled"] == pytest.approx(7.0)
    idle = policy_update(policy, engine, _group(advs=(0.0, 0.0, 0.0, 0.0)), cfg)["solver"]
    assert idle["skipped"] == 4 and idle["entropy"] == idle["entropy_sampled"] == pytest.approx(7.0)


def test_each_roles_truncation_rate_is_reported(tiny_config):
    """Share of a role's generations that ended at their token budget (issue 18): 1 of the challenger's
    4, 3 of the reasoner's 4; a trajectory says so by its finish_reason."""
    from trainer.rollout.types import Trajectory

    cfg = _cfg(tiny_config)
    policy = load_policy(cfg)
    challenger, reasoner = _group(role="challenger"), _group(seed=5, role="reasoner")
    challenger[0].truncated = True
    for s in reasoner[1:]:
        s.truncated = True
    metrics = policy_update(policy, make_engine(cfg, policy), challenger + reasoner, cfg)
    assert metrics["challenger"]["truncated_rate"] == 0.25 and metrics["reasoner"]["truncated_rate"] == 0.75
    cut = Trajectory(prompt_ids=[1], completion_ids=[2], loss_mask=[1], logprobs=[0.0], finish_reason="length")
    done = Trajectory(prompt_ids=[1], completion_ids=[2], loss_mask=[1], logprobs=[0.0], finish_reason="max_turns")
    assert Sample.from_trajectory(cut, 1.0).truncated and not Sample.from_trajectory(done, 1.0).truncated


def test_rollout_logprobs_are_reproduced_at_the_sampling_temperature(tiny_config, smollm2_tokenizer):
    """On-policy: the update recomputes the generator's log-probs, so every ratio is 1."""
    cfg = _cfg(tiny_config)
    policy = load_policy(cfg)
    gen = HFGenerator(policy.model, policy.tokenizer)
    prompt = smollm2_tokenizer.encode("The capital of France is")
    torch.manual_seed(0)
    outs = gen.generate([prompt] * 3, SamplingParams(temperature=0.7, max_new_tokens=6))
    samples = [Sample(c.prompt_ids, c.completion_ids, [1] * len(c.completion_ids), c.logprobs, 1.0,
                      temperature=c.temperature) for c in outs]
    metrics = policy_update(policy, make_engine(cfg, policy), samples, cfg)["policy"]
    assert metrics["clip_frac"] == 0.0
    assert abs(metrics["ratio_max"] - 1) < 1e-4 and abs(metrics["ratio_min"] - 1) < 1e-4


def test_kl_to_the_frozen_base_with_lora(tiny_config):
    cfg = load_config(tiny_config(model={"lora": {"r": 4}}, train={"device": "cpu", "kl_coef": 0.1, "lr": 0.05}))
    policy = load_policy(cfg)
    assert policy.is_lora and policy.ref_model is None  # the base is the adapter-disabled model
    engine = make_engine(cfg, policy)
    first = policy_update(policy, engine, _group(), cfg)["solver"]
    assert first["kl"] == pytest.approx(0.0, abs=1e-6)  # adapter B starts at 0: policy == base
    second = policy_update(policy, engine, _group(), cfg)["solver"]
    assert second["kl"] > 0


def test_sampling_draws_from_the_softmax_and_reports_its_logprobs():
    """The generator's inverse-CDF sampler (trainer/rollout/hf.py, edited for speed by core)."""
    from trainer.rollout.hf import sample_tokens

    logits = torch.tensor([[0.0, 1.0, 2.0, float("-inf"), 0.5]]).repeat(40000, 1)  # [B, V]
    g = torch.Generator().manual_seed(0)
    tokens, logps = sample_tokens(logits, 1.0, 1.0, None, g)
    freq = torch.bincount(tokens, minlength=5).float() / len(tokens)
    torch.testing.assert_close(freq, torch.softmax(logits[0], -1), atol=0.01, rtol=0)
    torch.testing.assert_close(logps, torch.log_softmax(logits, -1).gather(1, tokens[:, None]).squeeze(1))
    banned, _ = sample_tokens(logits, 1.0, 1.0, [2], g)
    assert not (banned == 2).any() and not (banned == 3).any()
    nucleus, _ = sample_tokens(logits, 1.0, 0.5, None, g)  # token 2 alone holds 0.54 >= 0.5
    assert (nucleus == 2).all()
    again, _ = sample_tokens(logits[:8], 0.7, 1.0, None, torch.Generator().manual_seed(1))
    same, _ = sample_tokens(logits[:8], 0.7, 1.0, None, torch.Generator().manual_seed(1))
    assert torch.equal(again, same)


# -- the chunked logits path (memfix: [N, V] float32 logits of a 16k-token micro-batch ran a 1.5B out of memory) --

def _chunk_of(monkeypatch, tokens: int, vocab: int) -> None:
    """Force the update's logits path to ``tokens`` tokens a chunk."""
    import trainer.update as update

    monkeypatch.setattr(update, "LOGITS_CHUNK_BYTES", tokens * 4 * vocab)
    assert update.logits_chunk_tokens(vocab) == tokens


@pytest.mark.parametrize("train", [{}, {"entropy_coef": 0.01, "micro_batch_size": 8}])
def test_a_tiny_logits_chunk_gives_the_loss_and_gradients_of_one_pass(tiny_config, monkeypatch, train):
    """28 trained tokens in chunks of 3 (checkpointed, recomputed in backward) vs the whole [N, V] at once
    (the default chunk holds them all: the unchunked code)."""
    cfg = _cfg(tiny_config, **train)
    samples = _group() + _group(seed=1, prompt_len=9)
    whole, m_whole = _grads_after_update(cfg, samples)
    vocab = load_policy(cfg).base_model().get_output_embeddings().weight.shape[0]
    _chunk_of(monkeypatch, 3, vocab)
    chunked, m_chunked = _grads_after_update(cfg, samples)
    for a, b in zip(whole, chunked):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    for key in ("loss", "pg_loss", "entropy", "clip_frac"):
        assert m_chunked["solver"][key] == pytest.approx(m_whole["solver"][key], rel=1e-5, abs=1e-7)


def test_the_kl_reference_is_chunked_too(tiny_config, monkeypatch):
    cfg = load_config(tiny_config(model={"lora": {"r": 4}}, train={"device": "cpu", "kl_coef": 0.1, "lr": 0.05}))

    def two_updates():
        torch.manual_seed(0)
        policy = load_policy(cfg)
        engine = make_engine(cfg, policy)
        policy_update(policy, engine, _group(), cfg)
        return policy_update(policy, engine, _group(), cfg)["solver"]

    whole = two_updates()
    _chunk_of(monkeypatch, 2, load_policy(cfg).base_model().get_output_embeddings().weight.shape[0])
    chunked = two_updates()
    assert whole["kl"] > 0
    # rel 2e-3: the chunked log-softmax sums in another order, and two Adam steps at lr 0.05 carry that into the
    # second update: 4e-4 apart on one 2-core CPU (2026-11-28), within 1e-4 on the CI machine before it
    for key in ("kl", "loss", "grad_norm"):
        assert chunked[key] == pytest.approx(whole[key], rel=2e-3)


def test_the_logits_path_peak_scales_with_the_chunk_not_the_micro_batch(tiny_config, monkeypatch):
    """Every tensor of vocabulary width created in the update's forward and backward, counted by a
    dispatch mode: with 4-token chunks none has more than 4 rows, though the micro-batch trains 28 tokens."""
    from torch.utils._python_dispatch import TorchDispatchMode

    cfg = _cfg(tiny_config, micro_batch_size=8, share_prompt_prefix=False, entropy_coef=0.01)  # one micro-batch
    policy = load_policy(cfg)
    vocab = policy.base_model().get_output_embeddings().weight.shape[0]
    samples = _group() + _group(seed=1, prompt_len=9)
    n_trained = sum(s.n_trained for s in samples)

    class WidestVocabRows(TorchDispatchMode):
        rows = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if any(r.alias_info is not None for r in func._schema.returns):
                return out  # a view (the output head's weight transposed) or in-place op allocates nothing
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-1] == vocab:
                    WidestVocabRows.rows = max(WidestVocabRows.rows, t.numel() // vocab)
            return out

    def widest():
        WidestVocabRows.rows = 0
        engine = make_engine(cfg, policy)
        engine.step = lambda: 0.0
        with WidestVocabRows():
            policy_update(policy, engine, samples, cfg)
        return WidestVocabRows.rows

    assert widest() >= n_trained == 28  # one chunk: the whole [N, V] (the old path)
    _chunk_of(monkeypatch, 4, vocab)
    assert widest() <= 4
