"""GRPO on a prompt set: the baseline every self-play paper compares against.

Per step: take ``train.prompts_per_step`` prompts (``data.path``: JSONL with prompt and answer,
or ``bundled:gsm8k``), sample ``rollout.group_size`` answers each, score them with the
verifier named by ``reward`` (exact | math | mcq), turn rewards into group-relative
advantages (``grpo.advantage``), and take one PPO-clip step with the shared update pass.

Run it::

    python -m trainer run examples/grpo_gsm8k.yaml --out var/runs/gsm8k

Departures from the paper (DeepSeekMath's GRPO, the baseline the self-play papers compare against):
- one optimizer step per batch (no PPO epochs), so the rollout's log-probs are the "old" ones;
- loss: token mean over the step (``train.loss_agg``; the paper averages each answer's tokens, then the group);
- KL to the frozen base only when ``train.kl_coef > 0`` (default 0, k3 estimator; the paper 0.04);
- outcome reward only (no process supervision), from the verifier named by ``reward``;
- the system prompt asks for a boxed answer (ours), and with the math verifier a numeric gold is
  compared with the last number of an answer that boxed nothing (GSM8K's usual reading);
- the answer budget is ``rollout.max_new_tokens`` (512 by default; ours, the paper gives 1024);
- ``train.overlap: one_step`` (ours, an opt-in: auto leaves it off until measured faster on a GPU, trainer/autotune.py):
  step t+1's batch is sampled by the weights before step t's update, while that update runs (trainer/overlap.py),
  so each batch trains one optimizer step after the weights that sampled it (``staleness`` 1 from the second
  step). The loss then takes the trainer's own pre-update log-probs as the PPO reference and weights each token's
  advantage by min(pi_trainer / pi_sampled, cap) (cap ``train.rollout_is_cap``, 2 where that is 0): AReaL's
  decoupled PPO with a capped behaviour weight. The paper samples and trains with the same weights.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from trainer.algos import get_advantage
from trainer.data import load_prompt_set
from trainer.prompts import chat
from trainer.rewards import control_rewards
from trainer.update import Sample
from trainer.verify import final_answer
from trainer.verify import score_answer as score  # noqa: F401  (the recipe's reward; tests import it here)
from trainer.verify import score_answers

ROLE = "solver"


def answer_of(text: str) -> str:
    """What the verifier compares: the final answer, else the whole text (math-verify and the
    MCQ parser then find the answer in it)."""
    found = final_answer(text)
    return found if found is not None else text


def next_batch(ctx, data: list[dict], n: int) -> list[dict]:
    """The next n records; a fresh seeded shuffle per epoch. Position lives in ctx.state."""
    epoch, cursor = ctx.state.get("epoch", 0), ctx.state.get("cursor", 0)
    shuffle = ctx.config.grpo.shuffle
    batch = []
    while len(batch) < n:
        order = np.random.default_rng([ctx.config.seed, epoch]).permutation(len(data)) if shuffle \
            else np.arange(len(data))
        take = order[cursor : cursor + n - len(batch)]
        batch += [data[i] for i in take]
        cursor += len(take)
        if cursor >= len(data):
            epoch, cursor = epoch + 1, 0
    ctx.state.update(epoch=epoch, cursor=cursor)
    return batch


def reward_stats(rewards: torch.Tensor) -> dict[str, float]:
    """rewards [N_groups, G] -> mean, std, fraction of groups whose rewards are all equal."""
    flat = rewards.flatten()
    zero_var = (rewards.max(dim=1).values == rewards.min(dim=1).values).float().mean()
    return {"reward_mean": float(flat.mean()), "reward_std": float(flat.std()) if flat.numel() > 1 else 0.0,
            "zero_variance_groups": float(zero_var)}


def run_grpo(ctx) -> None:
    cfg, sec = ctx.config, ctx.config.grpo
    data = load_prompt_set(cfg.data.path, sec.prompt_key, sec.answer_key, cfg.data.limit)
    if ctx.overlap is not None:
        return _run_overlapped(ctx, data)
    for step in ctx.steps():
        grpo_step(ctx, step, next_batch(ctx, data, cfg.train.prompts_per_step))


def _run_overlapped(ctx, data: list[dict]) -> None:
    """train.overlap one_step: take step t's batch (sampled while step t-1 updated), copy the weights W_{t-1}
    into the snapshot, start sampling step t+1's batch with them, then update on step t's batch."""
    cfg, overlap = ctx.config, ctx.overlap
    for step in ctx.steps():
        if not overlap.has(step):  # the run's first step (or a resume without a stored rollout): sample it now
            overlap.refresh(step - 1)
            _submit(ctx, step, next_batch(ctx, data, cfg.train.prompts_per_step))
        rollout = overlap.take(step)
        overlap.refresh(step - 1)  # one optimizer step per GRPO step: the live weights are W_{step-1}
        if step < cfg.train.steps:
            _submit(ctx, step + 1, next_batch(ctx, data, cfg.train.prompts_per_step))
        grpo_step(ctx, step, rollout.batch, rollout=rollout)


def _submit(ctx, step: int, batch: list[dict]) -> None:
    mine = ctx.shard(range(len(batch)))
    batch = [batch[i] for i in mine]
    G = ctx.config.rollout.group_size
    prompts = [chat(ctx.policy.tokenizer, ctx.config.grpo.system_prompt, row["prompt"]) for row in batch]
    ctx.overlap.submit(step, batch, list(mine), [p for p in prompts for _ in range(G)], ctx.sampling_params())


def grpo_step(ctx, step: int, batch: list[dict], rollout=None) -> dict[str, float]:
    """One GRPO step on ``batch`` (records with prompt and answer); returns the logged metrics.
    ``rollout`` (train.overlap): the batch's completions, sampled already (``batch`` is then this rank's)."""
    cfg, sec = ctx.config, ctx.config.grpo
    overlap_metrics = {}
    if rollout is None:
        mine = ctx.shard(range(len(batch)))  # several GPUs: each rank samples its share of the prompts
        batch = [batch[i] for i in mine]
        prompts = [chat(ctx.policy.tokenizer, sec.system_prompt, row["prompt"]) for row in batch]
        t0 = time.perf_counter()
        completions = ctx.generator.generate([p for p in prompts for _ in range(cfg.rollout.group_size)],
                                             ctx.sampling_params())
        gen_seconds = time.perf_counter() - t0
    else:
        mine, completions, gen_seconds = rollout.index, rollout.completions, rollout.gen_seconds
        # optimizer steps between the weights that sampled the batch and those the update starts from
        overlap_metrics = {"staleness": (step - 1) - rollout.version, "gen_wait_seconds": rollout.wait_seconds}
    G, n = cfg.rollout.group_size, len(batch)

    t_score = time.perf_counter()
    rewards = torch.tensor(score_answers([c.text for c in completions],  # = score() of each, math checks batched
                                         [batch[i // G]["answer"] for i in range(len(completions))],
                                         cfg.reward)).view(n, G)  # [n, G]
    score_seconds = time.perf_counter() - t_score  # the verifier's share of a step's time outside generation/update
    graded = rewards  # a control run (train.control): each answer's reward a coin flip, whatever it says
    rewards = torch.tensor(control_rewards(ctx, rewards.flatten().tolist())).view(n, G)
    adv = get_advantage(sec.advantage)(rewards).flatten()  # [n * G]
    samples = [Sample(prompt_ids=c.prompt_ids, completion_ids=c.completion_ids,
                      loss_mask=[1] * len(c.completion_ids), old_logprobs=c.logprobs,
                      advantage=float(a), role=ROLE, temperature=c.temperature,
                      truncated=c.finish_reason == "length")
               for c, a in zip(completions, adv.tolist())]

    t1 = time.perf_counter()
    metrics = ctx.update(samples)[ROLE]
    gen_tokens = sum(len(c.completion_ids) for c in completions)
    metrics = {
        **metrics, **reward_stats(rewards),
        "accuracy": float(graded.mean()),  # the verifier's verdicts (= reward_mean unless a control flips coins)
        "response_length": gen_tokens / len(completions),
        "gen_tokens_per_s": gen_tokens / max(gen_seconds, 1e-9),
        "gen_seconds": gen_seconds, "update_seconds": time.perf_counter() - t1, "score_seconds": score_seconds,
        **overlap_metrics,
    }
    ctx.log(step, ROLE, metrics)
    ctx.samples(step, _records(step, batch, completions, rewards, sec.log_samples, G, mine))
    return metrics


def _records(step, batch, completions, rewards, limit, G, index=None) -> list[dict]:
    """Sink records: the first ``limit`` attempts and the tasks they answer. ``index``: each
    prompt's position in the whole step's batch (keys are global when ranks share a step)."""
    out, tasks = [], set()
    index = list(range(len(batch))) if index is None else index
    for i, c in enumerate(completions[:limit]):
        j = i // G
        task_key = f"{step}:t{index[j]}"
        if task_key not in tasks:
            tasks.add(task_key)
            group = rewards[j]
            out.append({"kind": "task", "key": task_key, "role": "dataset", "step": step,
                        "question": batch[j]["prompt"], "answer": batch[j]["answer"], "valid": True,
                        "pass_rate": float(group.mean()), "document_id": None, "format": None, "data": {}})
        out.append({"kind": "attempt", "key": f"{step}:{index[j] * G + i % G}", "task_key": task_key, "role": ROLE, "step": step,
                    "text": c.text, "reward": float(rewards.flatten()[i]),
                    "turns": [{"role": "assistant", "text": c.text}], "passages": [],
                    "token_ids": c.prompt_ids + c.completion_ids,
                    "loss_mask": [0] * len(c.prompt_ids) + [1] * len(c.completion_ids),
                    "data": {"finish_reason": c.finish_reason}})
    return out
