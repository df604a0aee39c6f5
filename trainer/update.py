"""The shared policy-update pass: rollout samples in, one optimizer step out, metrics per role.

``policy_update(policy, engine, samples, cfg)`` takes ``Sample``s (prompt ids, completion ids
with a loss mask, the rollout's log-probs, an advantage, a role), splits them into
micro-batches, and for each one computes the new log-probs, the PPO-clip loss
(``trainer.algos.policy_loss``), optionally the KL to the frozen base and an entropy bonus,
and calls ``engine.backward``; then one ``engine.step()``.

Where the time goes, and what this file does about it:
- Old log-probs are the rollout's (no extra forward pass before the update).
- Samples of one prompt (a GRPO group) share the prompt prefix: the prompt runs through the
  model ONCE per micro-batch, its key/value cache is expanded over the group and the
  completions attend to it; gradients from every completion flow back into the single
  prompt pass. Exact (same numbers as the padded batch), and for G=8 it removes 7/8 of the
  prompt compute in forward and backward. It pays only for long prompts: the completions then
  run padded against a cache, not packed; ``train.share_prompt_prefix: auto`` shares a group
  only where ``trainer.autotune.share_pays`` says so (the other settings' ``auto`` live there too).
- Right padding and no attention mask: under causal attention trailing pads cannot influence
  real tokens, so the fast causal kernel runs.
- The output head runs only on the trained tokens (loss_mask = 1): hidden states are
  gathered first, so no [B, L, V] logits exist for prompt, tool output or padding; log-probs
  are the gathered logit minus logsumexp, in float32. Even so, [N, V] float32 logits of a
  16k-token packed micro-batch and a 152k vocabulary are 10 GB a copy: the head and the
  log-softmax run over chunks of tokens (``chunked_logprobs_and_entropy``, ``LOGITS_CHUNK_BYTES``
  of float32 logits at a time, each chunk checkpointed and recomputed in backward), so this
  path's memory scales with the chunk, not with ``train.micro_batch_tokens`` (the same numbers;
  only an ``extra_loss``, which reads the whole logits, still gets them at once).
- Samples whose advantage is 0 give an exactly-zero gradient when there is no KL/entropy
  term: with ``train.skip_zero_advantage`` they are not run (they still count in the loss
  denominator, so the result is unchanged).
- Loss normalisation is global: token_mean divides by the trained tokens of the whole step,
  so gradient accumulation gives the same update as one big batch; with several ranks the
  denominator counts every rank's tokens and every rank runs the same number of micro-batches
  (ZeRO-3 gathers weights in each forward), so N GPUs give the update of one big batch too.
"""
from __future__ import annotations

import contextlib
import inspect
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.utils.checkpoint

from transformers import DynamicCache

from trainer import distributed as dist
from trainer.algos import aggregate, entropy, get_kl, policy_loss, token_logprobs
from trainer.algos.losses import per_token_advantage, truncated_is_weights
from trainer.autotune import pick_micro_batch_tokens, pick_packing, share_pays


@dataclass
class Sample:
    prompt_ids: list[int]
    completion_ids: list[int]  # everything after the prompt, model tokens and tool output
    loss_mask: list[int]  # 1 = trained (model-generated), 0 = tool output
    old_logprobs: list[float]  # rollout log-probs at the sampling temperature, 0.0 where masked
    advantage: float
    role: str = "policy"
    temperature: float | None = None  # of old_logprobs; None = rollout.temperature
    teacher_prompt_ids: list[int] | None = None  # pi-Play: the teacher's privileged prompt
    truncated: bool = False  # the generation ended at its token budget (finish_reason "length")
    extras: dict = field(default_factory=dict)

    @classmethod
    def from_trajectory(cls, traj, advantage: float, role: str = "policy", **kwargs) -> "Sample":
        kwargs.setdefault("truncated", traj.finish_reason == "length")
        return cls(prompt_ids=list(traj.prompt_ids), completion_ids=list(traj.completion_ids),
                   loss_mask=list(traj.loss_mask), old_logprobs=list(traj.logprobs),
                   advantage=float(advantage), role=role, **kwargs)

    @property
    def n_trained(self) -> int:
        return int(sum(self.loss_mask))


@dataclass
class MicroBatch:
    """Padded tensors of a few samples. ``sel`` marks the trained tokens, row-major."""

    samples: list[Sample]
    completion: torch.Tensor  # [B, C] right-padded completion ids
    mask: torch.Tensor  # [B, C] bool, trained tokens
    old_logp: torch.Tensor  # [B, C]
    adv: torch.Tensor  # [B]
    temp: torch.Tensor  # [N] temperature of each trained token
    shared_prompt: bool  # all samples have the same prompt (run it once)
    packed: bool = False  # train.packing: one row, no padding, varlen attention (trainer/packing.py)


# extra_loss(mb, logits [N, V] at temperature 1 on the trained tokens) -> (per-token loss [N], metrics)
ExtraLoss = Callable[[MicroBatch, torch.Tensor], tuple[torch.Tensor, dict[str, float]]]


def _pad(rows: list[list], value, dtype, device) -> torch.Tensor:
    width = max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), max(width, 1)), value, dtype=dtype)
    for i, r in enumerate(rows):
        if r:
            out[i, : len(r)] = torch.tensor(r, dtype=dtype)
    return out.to(device)


def make_micro_batch(samples: list[Sample], default_temp: float, device, shared: bool,
                     packed: bool = False) -> MicroBatch:
    mask = _pad([s.loss_mask for s in samples], 0, torch.bool, device)  # [B, C]
    temps = [s.temperature or default_temp or 1.0 for s in samples]
    temp = torch.tensor(temps, dtype=torch.float32, device=device)[:, None].expand_as(mask)[mask]  # [N]
    return MicroBatch(
        samples=samples,
        completion=_pad([s.completion_ids for s in samples], 0, torch.long, device),  # [B, C]
        mask=mask,
        old_logp=_pad([s.old_logprobs for s in samples], 0.0, torch.float32, device),  # [B, C]
        adv=torch.tensor([s.advantage for s in samples], dtype=torch.float32, device=device),  # [B]
        temp=temp, shared_prompt=shared, packed=packed)


def plan_micro_batches(samples: list[Sample], size: int, share_prefix: bool | str,
                       max_tokens: int | None = None, device_type: str = "cpu") -> list[tuple[list[Sample], bool]]:
    """Group by role, then by prompt (groups of >1 share the prefix), longest first.

    ``share_prefix`` "auto": a group shares only where ``trainer.autotune.share_pays`` says it
    pays on ``device_type``; the others run as singles. ``max_tokens`` (packing): the singles go
    into bins of at most that many tokens instead of ``size`` samples each."""
    plans = []
    by_role: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        by_role[s.role].append(s)
    for role_samples in by_role.values():
        singles = []
        if share_prefix:
            by_prompt: dict[tuple, list[Sample]] = defaultdict(list)
            for s in role_samples:
                by_prompt[tuple(s.prompt_ids)].append(s)
            for group in by_prompt.values():
                if len(group) == 1 or (share_prefix == "auto" and not share_pays(
                        len(group[0].prompt_ids), [len(s.completion_ids) for s in group], size, device_type)):
                    singles += group
                    continue
                group = sorted(group, key=lambda s: -len(s.completion_ids))
                plans += [(group[i : i + size], True) for i in range(0, len(group), size)]
        else:
            singles = role_samples
        singles = sorted(singles, key=lambda s: -(len(s.prompt_ids) + len(s.completion_ids)))
        if max_tokens:
            from trainer.packing import plan_bins

            bins = plan_bins([len(s.prompt_ids) + len(s.completion_ids) for s in singles], max_tokens)
            plans += [([singles[i] for i in b], False) for b in bins]
            continue
        plans += [(singles[i : i + size], False) for i in range(0, len(singles), size)]
    return plans


def _splittable(lm) -> bool:
    """True when logits are exactly lm_head(decoder(x)) (no softcapping / logit scale)."""
    cfg = lm.config
    odd = any(getattr(cfg, a, None) not in (None, 1.0) for a in ("final_logit_softcapping", "logit_scale"))
    return hasattr(lm, "get_decoder") and lm.get_output_embeddings() is not None and not odd


def trained_hidden_or_logits(lm, mb: MicroBatch, device) -> tuple[torch.Tensor, bool]:
    """Hidden states [N, H] predicting each trained token (or logits [N, V] for odd models).

    Returns (tensor, is_logits).
    """
    B, C = mb.completion.shape
    if not _splittable(lm):
        ids, starts = _full_sequences(mb, device)
        logits = lm(input_ids=ids, use_cache=False).logits  # [B, L, V]
        return _gather_predictions(logits, starts, C)[mb.mask], True  # [N, V]
    decoder = lm.get_decoder()
    can_cache = not (getattr(decoder, "gradient_checkpointing", False) and decoder.training)
    if mb.shared_prompt and can_cache:
        prompt = torch.tensor([mb.samples[0].prompt_ids], dtype=torch.long, device=device)  # [1, P]
        cache = DynamicCache(config=decoder.config)
        kw = _cache_kwarg(decoder)
        h_prompt = decoder(input_ids=prompt, use_cache=True, **{kw: cache}).last_hidden_state  # [1, P, H]
        cache.batch_repeat_interleave(B)  # [B, heads, P, D] per layer, still in the autograd graph
        h_comp = decoder(input_ids=mb.completion, use_cache=True, **{kw: cache}).last_hidden_state  # [B, C, H]
        first = h_prompt[:, -1:].expand(B, 1, -1)  # [B, 1, H] predicts completion token 0
        h = torch.cat([first, h_comp[:, :-1]], dim=1)  # [B, C, H]
        return h[mb.mask], False  # [N, H]
    if mb.packed:
        from trainer.packing import packed_trained_hidden

        return packed_trained_hidden(decoder, mb.samples, mb.mask), False  # [N, H]
    ids, starts = _full_sequences(mb, device)
    h_all = decoder(input_ids=ids, use_cache=False).last_hidden_state  # [B, L, H]
    return _gather_predictions(h_all, starts, C)[mb.mask], False  # [N, H]


def _cache_kwarg(decoder) -> str:
    """transformers >= 5.2x names the cache argument ``cache``; older ones ``past_key_values``."""
    params = inspect.signature(decoder.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _full_sequences(mb: MicroBatch, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded prompt+completion ids [B, L] and each completion's start index [B]."""
    rows = [s.prompt_ids + s.completion_ids for s in mb.samples]
    starts = torch.tensor([len(s.prompt_ids) for s in mb.samples], device=device)
    return _pad(rows, 0, torch.long, device), starts


def _gather_predictions(x: torch.Tensor, starts: torch.Tensor, C: int) -> torch.Tensor:
    """Positions start-1 .. start+C-2 of each row (they predict the completion). [B, L, D] -> [B, C, D]"""
    idx = (starts[:, None] - 1 + torch.arange(C, device=x.device)[None, :]).clamp(max=x.shape[1] - 1)  # [B, C]
    return x.gather(1, idx[:, :, None].expand(-1, -1, x.shape[-1]))  # [B, C, D]


def trained_logits(lm, mb: MicroBatch, device) -> torch.Tensor:
    """Logits [N, V] of the trained tokens, unscaled."""
    x, is_logits = trained_hidden_or_logits(lm, mb, device)
    return x if is_logits else lm.get_output_embeddings()(x)  # [N, V]


def _scatter(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[N] values on the trained tokens -> [B, C] (zeros elsewhere)."""
    out = torch.zeros(mask.shape, dtype=values.dtype, device=values.device)
    out[mask] = values
    return out


class _RoleStats:
    def __init__(self):
        self.sums = defaultdict(float)

    def add(self, key, value, weight=1.0):
        self.sums[key] += float(value) * weight


def policy_update(policy, engine, samples: list[Sample], cfg, extra_loss: ExtraLoss | None = None,
                  step: bool = True, is_cap: float | None = None) -> dict[str, dict[str, float]]:
    """Micro-batched forward/backward over ``samples`` and one optimizer step.

    Returns {role: metrics}: loss, pg_loss, kl, entropy, entropy_sampled, clip_frac (token means
    over the role), ratio_min/ratio_max, tokens (trained tokens), samples, skipped, truncated_rate
    (share of the role's samples whose generation ended at its token budget), grad_norm, lr,
    prompt_shared (share of the run samples whose group's prompt ran once).
    Separate policies (``policy.roles``): each role's samples update its own adapter with its own
    optimizer, the role's adapter active (its own loss denominator: the roles are separate models).
    ``is_cap``: weight each token by min(pi_trainer / pi_sampled, is_cap) against the samples' log-probs, with the
    trainer's own pre-update log-probs as the PPO reference (``rollout_is``), whatever ``train.rollout_is_cap``
    says: ``train.overlap`` one_step, whose samples come from the weights one step older (trainer/overlap.py).
    """
    if not getattr(policy, "roles", ()):
        return _update(policy, engine, samples, cfg, extra_loss, step, is_cap)
    out = {}
    for role in dict.fromkeys(s.role for s in samples):
        with policy.acting(role):
            out.update(_update(policy, engine.for_role(role), [s for s in samples if s.role == role], cfg,
                               extra_loss, step, is_cap))
    return out


def _update(policy, engine, samples: list[Sample], cfg, extra_loss: ExtraLoss | None,
            step: bool, is_cap: float | None = None) -> dict[str, dict[str, float]]:
    """``policy_update`` of one policy (one engine)."""
    t = cfg.train
    device = policy.device
    samples = [s for s in samples if len(s.completion_ids) > 0]
    max_len = cfg.rollout.max_new_tokens
    denom = _global_denominator(samples, t.loss_agg, max_len)
    kl_fn = get_kl(t.kl_estimator) if t.kl_coef > 0 else None
    if kl_fn is not None and not policy.has_frozen:
        raise RuntimeError("train.kl_coef > 0 needs the frozen base: load the policy with frozen=True")
    skip_zero = t.skip_zero_advantage and t.kl_coef == 0 and t.entropy_coef == 0 and extra_loss is None
    run = [s for s in samples if not (skip_zero and s.advantage == 0.0) and s.n_trained > 0]
    stats: dict[str, _RoleStats] = defaultdict(_RoleStats)
    ran = {id(s) for s in run}
    needs_rollout_lp = cfg.rollout_logprobs or bool(is_cap)  # the PPO reference, or the rollout_is weights
    for s in samples:
        st = stats[s.role]
        st.add("samples", 1)
        st.add("tokens", s.n_trained)
        st.add("skipped", 0 if id(s) in ran else 1)
        st.add("truncated", 1 if s.truncated else 0)
        nll = -sum(lp for lp, m in zip(s.old_logprobs, s.loss_mask) if m)
        if nll == nll:  # nan: the rollout engine was not asked for log-probs (train.old_logprobs)
            st.add("neg_logprob", nll)
            st.add("neg_logprob_tokens", s.n_trained)
        elif needs_rollout_lp and id(s) in ran:
            raise ValueError("a sample has no rollout log-probs (nan) but the update needs them (the PPO reference, "
                             "or the train.rollout_is_cap weights): set train.old_logprobs to trainer (or auto with "
                             "rollout.backend=vllm) and rollout_is_cap to 0, or have the rollout report log-probs "
                             "(SamplingParams.logprobs=True)")

    lm = policy.base_model()
    was_training = policy.model.training
    policy.model.train()
    try:
        packing = pick_packing(t.packing, device.type)  # auto: on a GPU (trainer/autotune.py)
        # model.compile compiles training forwards without a KV cache: the shared-prompt path (a cache
        # of the group's prompt) would run every layer eagerly, so compile packs/pads groups instead.
        share = False if cfg.model.compile else t.share_prompt_prefix  # auto: per group, where it pays
        tokens = pick_micro_batch_tokens(t.micro_batch_tokens, model_size(lm), gpu_memory(device)) if packing else None
        plan = plan_micro_batches(run, t.micro_batch_size, share, tokens, device_type=device.type)
        idle = _missing_micro_batches(len(plan), engine)  # agreed BEFORE any backward: ZeRO reduces in each
        for group, shared in plan:
            mb = make_micro_batch(group, cfg.rollout.temperature, device, shared, packed=packing)
            loss, parts = _micro_loss(policy, lm, mb, cfg, kl_fn, denom, max_len, extra_loss, is_cap)
            engine.backward(loss)
            st = stats[group[0].role]
            st.add("shared_samples", len(group) if shared else 0)
            for key, value in parts.items():
                if key == "ratio_max":
                    st.sums[key] = max(st.sums.get(key, value), value)
                elif key == "ratio_min":
                    st.sums[key] = min(st.sums.get(key, value), value)
                else:
                    st.add(key, value)
        for _ in range(idle):
            _idle_pass(policy, lm, engine, cfg, kl_fn, max_len)
    finally:
        policy.model.train(was_training)
    grad_norm = engine.step() if step else float("nan")
    return {role: _finish(st.sums, grad_norm, engine.lr) for role, st in stats.items()}


def model_size(model) -> int:
    """Parameters of ``model`` (ZeRO-3 partitions them: their full size is ``ds_numel``); counted once per model."""
    n = getattr(model, "_selfplay_n_params", None)
    if n is None:
        n = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
        try:
            model._selfplay_n_params = n
        except AttributeError:
            pass
    return n


def gpu_memory(device) -> int | None:
    """Total memory of a CUDA ``device`` in bytes; None elsewhere."""
    if getattr(device, "type", device) != "cuda":
        return None
    return torch.cuda.get_device_properties(device).total_memory


def _global_denominator(samples: list[Sample], loss_agg: str, max_len: int) -> float:
    """The loss denominator of the whole step: trained tokens (token_mean) or samples x max_len
    (seq_sum), counted over every rank and divided by the rank count, because the engines
    average gradients over ranks. One process: 3 samples of 10 trained tokens -> 30."""
    tokens = sum(s.n_trained for s in samples)
    count = len(samples)
    ranks = 1
    if dist.active():
        tokens, count = dist.all_reduce([tokens, count])
        ranks = dist.world_size()
    total = max(tokens, 1) if loss_agg == "token_mean" else max(count, 1) * max_len
    return float(total) / ranks


def _missing_micro_batches(planned: int, engine=None) -> int:
    """How many micro-batches this rank must add to match the busiest rank. A DeepSpeed engine
    also needs one backward per step even when every sample was skipped (its step reads the
    reduced gradients); alone with the torch engine, nothing is added."""
    busiest = int(dist.all_reduce([planned], "max")[0]) if dist.active() else planned
    if getattr(engine, "zero_stage", None) is not None:
        busiest = max(busiest, 1)
    return busiest - planned


def _idle_pass(policy, lm, engine, cfg, kl_fn, max_len) -> None:
    """A forward/backward with an exactly-zero gradient. Under ZeRO-3 every forward gathers the
    weights and every backward reduces gradients with all ranks, so a rank with fewer samples
    runs these until all ranks have run the same number of micro-batches."""
    tok = policy.tokenizer.eos_token_id or 0
    s = Sample(prompt_ids=[tok], completion_ids=[tok], loss_mask=[1], old_logprobs=[0.0], advantage=0.0)
    mb = make_micro_batch([s], cfg.rollout.temperature, policy.device, shared=False)
    loss, _ = _micro_loss(policy, lm, mb, cfg, kl_fn, 1.0, max_len, None)
    engine.backward(loss * 0.0)


# The update's logits path: the output head and the float32 log-softmax run over at most this many
# bytes of float32 [tokens, V] logits at once (LOGITS_CHUNK_BYTES // (4 V) tokens per chunk: 1,766 for
# Qwen2.5's 151,936-token vocabulary), inside a checkpointed function, so the backward recomputes a
# chunk's logits instead of keeping every chunk's. Peak memory of this path scales with the chunk, not
# with train.micro_batch_tokens.
LOGITS_CHUNK_BYTES = 1 << 30


def logits_chunk_tokens(vocab_size: int, budget_bytes: int | None = None) -> int:
    """Tokens per chunk of the update's logits path: float32 [chunk, V] logits of at most
    ``budget_bytes`` (default ``LOGITS_CHUNK_BYTES``), at least 1. 1 GiB, V = 151,936 -> 1,766."""
    budget = LOGITS_CHUNK_BYTES if budget_bytes is None else int(budget_bytes)
    return max(1, budget // (4 * max(int(vocab_size), 1)))


def _logprobs_and_entropy(logits: torch.Tensor, ids: torch.Tensor, temp: torch.Tensor, entropy_grad: bool,
                          compiled: bool = False, with_entropy: bool = True):
    """log p(ids) [N] and entropy [N] of softmax(logits / temp), float32 (the entropy carries a
    gradient only with ``entropy_grad``; None without ``with_entropy``)."""
    if compiled:  # one fused pass over the logits (trainer/compile.py)
        from trainer.compile import compiled_logprobs_and_entropy

        return compiled_logprobs_and_entropy()(logits, ids, temp, entropy_grad)  # [N], [N]
    scaled = logits.float() / temp[:, None]  # [N, V]
    logp = token_logprobs(scaled, ids)  # [N]
    if not with_entropy:
        return logp, None
    with contextlib.nullcontext() if entropy_grad else torch.no_grad():
        ent = entropy(scaled)  # [N]
    return logp, ent


def chunked_logprobs_and_entropy(head, x: torch.Tensor, ids: torch.Tensor, temp: torch.Tensor, *,
                                 entropy_grad: bool, autocast=contextlib.nullcontext, compiled: bool = False,
                                 with_entropy: bool = True, chunk: int | None = None):
    """Per-token log-probs [N] (and entropy [N]) of the trained tokens without [N, V] logits.

    ``x``: hidden states [N, H] and ``head`` the output layer (logits = head(x), run under
    ``autocast()`` as the plain path does), or logits [N, V] with ``head`` None. Rows go through
    ``head`` + float32 log-softmax ``chunk`` at a time (default ``logits_chunk_tokens(V)``); with
    more than one chunk and gradients on, each chunk is a non-reentrant checkpoint: only its slice of
    ``x`` is kept for backward, which recomputes that chunk's logits (one extra output-head matmul of
    the chunked rows). Same numbers as the unchunked computation (row-wise ops; the matmul of fewer
    rows may round differently in the last bit). One chunk runs exactly the unchunked code.
    """
    vocab = x.shape[-1] if head is None else head.weight.shape[0]
    chunk = chunk or logits_chunk_tokens(vocab)
    n = x.shape[0]

    def run(xc, ic, tc):
        if head is None:
            logits = xc
        else:
            with autocast():
                logits = head(xc)  # [n, V]
        return _logprobs_and_entropy(logits, ic, tc, entropy_grad, compiled, with_entropy)

    if n <= chunk:
        return run(x, ids, temp)
    grad = torch.is_grad_enabled() and (x.requires_grad or (head is not None and any(
        p.requires_grad for p in head.parameters())))
    logps, ents = [], []
    for start in range(0, n, chunk):
        args = (x[start : start + chunk], ids[start : start + chunk], temp[start : start + chunk])
        if grad:
            lp, en = torch.utils.checkpoint.checkpoint(run, *args, use_reentrant=False, preserve_rng_state=False)
        else:
            lp, en = run(*args)
        logps.append(lp)
        ents.append(en)
    return torch.cat(logps), (torch.cat(ents) if with_entropy else None)


def _micro_loss(policy, lm, mb, cfg, kl_fn, denom, max_len, extra_loss, is_cap=None):
    """Loss of one micro-batch (already divided by the step's global denominator) and metric sums.
    ``is_cap``: see ``policy_update`` (it replaces train.rollout_is_cap)."""
    t = cfg.train
    with policy.autocast():
        x, is_logits = trained_hidden_or_logits(lm, mb, policy.device)  # [N, H] (or [N, V] for odd models)
    ids = mb.completion[mb.mask]  # [N]
    if extra_loss is None:  # the output head and the float32 log-softmax in chunks of tokens (no [N, V] at once)
        logits = None
        logp_flat, ent = chunked_logprobs_and_entropy(
            None if is_logits else lm.get_output_embeddings(), x, ids, mb.temp, entropy_grad=t.entropy_coef > 0,
            autocast=policy.autocast, compiled=cfg.model.compile)  # [N], [N]
    else:  # the extra loss reads the whole [N, V] logits (pi-Play's teacher divergence)
        with policy.autocast():
            logits = x if is_logits else lm.get_output_embeddings()(x)  # [N, V]
        logp_flat, ent = _logprobs_and_entropy(logits, ids, mb.temp, t.entropy_coef > 0, cfg.model.compile)
    logp = _scatter(logp_flat, mb.mask)  # [B, C]
    n = int(mb.mask.sum())
    cap = is_cap or t.rollout_is_cap
    if cap > 0:
        reference, adv, is_parts = rollout_is(logp, mb.old_logp, mb.adv, mb.mask, cap)
    elif cfg.trainer_reference:  # one optimizer step per batch: this forward runs the pre-update weights
        reference, adv, is_parts = logp.detach(), mb.adv, {}
    else:
        reference, adv, is_parts = mb.old_logp, mb.adv, {}
    pg, clip = policy_loss(logp, reference, adv, mb.mask, t.clip_low, t.clip_high,
                           agg=t.loss_agg, max_len=max_len, denom=denom)
    loss = pg
    parts = {"pg_sum": float(pg.detach()) * denom, "clip_sum": clip["clip_frac"] * n, "run_tokens": n,
             "ratio_max": clip["ratio_max"], "ratio_min": clip["ratio_min"], **is_parts}
    if not (cfg.rollout_logprobs or is_cap):  # no rollout log-probs: entropy_sampled is the trainer's -log p
        parts["run_neg_logprob"] = float(-(reference * mb.mask).sum())
    parts["entropy_sum"] = float(ent.detach().sum())
    if t.entropy_coef > 0:
        loss = loss - t.entropy_coef * aggregate(_scatter(ent, mb.mask), mb.mask, t.loss_agg, max_len, denom)
    if kl_fn is not None:
        with torch.no_grad(), policy.frozen() as base, policy.autocast():
            ref_model = base.get_base_model() if policy.is_lora else base
            xr, ref_is_logits = trained_hidden_or_logits(ref_model, mb, policy.device)  # [N, H] or [N, V]
            ref_flat, _ = chunked_logprobs_and_entropy(
                None if ref_is_logits else ref_model.get_output_embeddings(), xr, ids, mb.temp,
                entropy_grad=False, autocast=policy.autocast, with_entropy=False)  # [N]
            ref_logp = _scatter(ref_flat, mb.mask)  # [B, C]
        kl = kl_fn(logp, ref_logp)  # [B, C]
        kl_loss = aggregate(kl, mb.mask, t.loss_agg, max_len, denom)
        loss = loss + t.kl_coef * kl_loss
        parts["kl_sum"] = float((kl.detach() * mb.mask).sum())
    if extra_loss is not None:
        per_token, extra_metrics = extra_loss(mb, logits)  # [N]
        loss = loss + aggregate(_scatter(per_token, mb.mask), mb.mask, t.loss_agg, max_len, denom)
        for key, value in extra_metrics.items():
            parts[f"{key}_sum"] = float(value) * n
    parts["loss_sum"] = float(loss.detach()) * denom
    return loss, parts


def rollout_is(logp: torch.Tensor, rollout_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
               cap: float) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Truncated importance sampling for a rollout engine whose log-probs differ from the trainer's.

    The PPO reference becomes the trainer's own log-probs before this update (``logp`` detached:
    the step makes one optimizer update, so every micro-batch's forward runs the pre-update
    weights) and each token's advantage is weighted by w = min(exp(logp - rollout_logp), cap).
    logp, rollout_logp, mask: [B, C]; adv: [B]. Returns (reference [B, C], advantage [B, C],
    metric sums: is_weight, is_truncated (share of tokens at the cap), rollout_kl (k1 estimate of
    KL(rollout || trainer) = mean(rollout_logp - logp)), each summed over the masked tokens, and
    ratio_max / ratio_min of pi_trainer / pi_rollout, since the PPO ratio itself is 1 here).
    """
    reference = logp.detach()  # [B, C]
    w = truncated_is_weights(reference, rollout_logp, cap) * mask  # [B, C]
    a = per_token_advantage(adv, w) * w  # [B, C]
    m = mask.bool()
    ratio = torch.exp(reference - rollout_logp)[m]  # [N] untruncated: the PPO ratio is 1 here, this is the gap
    if ratio.numel() == 0:
        return reference, a, {}
    weight, truncated, kl, r_max, r_min = torch.stack([w[m].sum(), (w[m] >= cap).sum().to(w.dtype),
                                                       (rollout_logp - reference)[m].sum(), ratio.max(),
                                                       ratio.min()]).tolist()  # one device sync
    return reference, a, {"is_weight_sum": weight, "is_truncated_sum": truncated, "rollout_kl_sum": kl,
                          "ratio_max": r_max, "ratio_min": r_min}


def _finish(sums: dict, grad_norm: float, lr: float) -> dict[str, float]:
    """Sums -> means: losses per trained token of the role, rates per run token."""
    out = {"samples": sums["samples"], "tokens": sums["tokens"], "skipped": sums["skipped"],
           "truncated_rate": sums.get("truncated", 0.0) / max(sums["samples"], 1.0), "grad_norm": grad_norm, "lr": lr}
    # share of the run (not skipped) samples whose group ran its prompt once (train.share_prompt_prefix)
    out["prompt_shared"] = sums.get("shared_samples", 0.0) / max(sums["samples"] - sums["skipped"], 1.0)
    tokens = max(sums["tokens"], 1.0)
    run_tokens = sums.get("run_tokens", 0.0)
    out["loss"] = sums.get("loss_sum", 0.0) / tokens
    out["pg_loss"] = sums.get("pg_sum", 0.0) / tokens
    for key, value in sums.items():
        if key.endswith("_sum") and key not in ("loss_sum", "pg_sum") and run_tokens:
            out[key[: -len("_sum")]] = value / run_tokens
    out["clip_frac"] = out.pop("clip", 0.0)
    # Mean -log p of the sampled tokens: an unbiased estimate of the policy's entropy at the
    # sampling temperature, free and always there; "entropy" (exact, from our forward) falls
    # back to it when every sample of the role was skipped.
    # Without rollout log-probs (train.old_logprobs: trainer) it is the trainer's, over the run tokens.
    if sums.get("neg_logprob_tokens"):
        out["entropy_sampled"] = sums["neg_logprob"] / sums["neg_logprob_tokens"]
    else:
        out["entropy_sampled"] = sums.get("run_neg_logprob", 0.0) / max(run_tokens, 1.0)
    out.setdefault("entropy", out["entropy_sampled"])
    for key in ("ratio_max", "ratio_min"):  # how far the rollout's log-probs are from ours
        if key in sums:
            out[key] = sums[key]
    return out
