"""What a run will cost, shown before it is launched (issue 20): tokens generated per step, and a
rough time per step on the queue it goes to.

- Tokens: the most a step can generate under the config (every sequence at ``max_new_tokens``),
  as the method's config section counts it (``step_tokens`` in trainer/method_configs.py): GRPO
  ``prompts_per_step x group_size x max_new_tokens``; SPICE per document one Challenger round
  plus the Reasoner's answers; the other methods are counted like GRPO (their extra turns and
  judge calls come on top, so it says "at least").
- Time: measured, never assumed: the median ``step_seconds`` of the newest run of the same method
  and model on that queue (``metrics.step_estimate``), scaled by the ratio of the two configs'
  token budgets. Without such a run it says so; the run page then times the first step.

>>> step_tokens("grpo", {"train": {"prompts_per_step": 2}, "rollout": {"group_size": 4, "max_new_tokens": 100}})
(8, 800, 'exact')
"""
from __future__ import annotations

from apps.runs import metrics as run_metrics
from apps.runs.models import Run
from trainer.method_configs import SECTIONS, dotted


def step_tokens(method: str, values: dict) -> tuple[int, int, str]:
    """(sequences, most tokens generated, "exact" | "at least") of one step of a config dict."""
    section = SECTIONS[method]
    sequences, tokens = section.step_tokens(values)
    return sequences, tokens, "exact" if section.step_tokens_exact else "at least"


def estimate(method: str, model: str, values: dict, queue: str) -> dict:
    """{"sequences", "tokens", "tokens_kind", "step_seconds" | None, "total_seconds" | None, "basis", "text"}."""
    sequences, tokens, kind = step_tokens(method, values)
    steps = int(dotted(values, "train.steps", 1))
    probe = Run(pk=None, method=method, model_name=model, queue=queue)
    timed = run_metrics.step_estimate(probe)
    out = {"sequences": sequences, "tokens": tokens, "tokens_kind": kind, "step_seconds": None, "total_seconds": None}
    head = f"{'at most' if kind == 'exact' else 'at least'} {tokens:,} generated tokens a step ({sequences:,} sequences)"
    if timed is None:
        out["basis"] = ""
        out["text"] = (f"{head}; no earlier {method} run of {model} on {queue} to time a step by: the run page "
                       "times the first step")
        return out
    source = Run.objects.filter(pk=timed["run_id"]).values_list("method", "config").first()
    _, source_tokens, _ = step_tokens(method, source[1] or {}) if source else (0, 0, "")
    scale = tokens / source_tokens if source_tokens else 1.0
    seconds = timed["seconds"] * scale
    out.update(step_seconds=seconds, total_seconds=seconds * steps,
               basis=f"run {timed['run_id']}: {run_metrics.duration(timed['seconds'])} a step at "
                     f"{source_tokens:,} tokens")
    out["text"] = (f"{head}; about {run_metrics.duration(seconds)} a step on {queue}, "
                   f"{run_metrics.duration(seconds * steps)} for {steps:,} steps (scaled from {out['basis']})")
    return out
