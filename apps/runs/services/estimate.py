"""What a run will cost, shown before it is launched (issue 20): tokens generated per step, and a
rough time per step on the queue it goes to.

- Tokens: the most a step can generate under the config (every sequence at ``max_new_tokens``):
  GRPO ``prompts_per_step x group_size x max_new_tokens``; SPICE per document one Challenger round
  (``challenger_attempts x (format_max_new_tokens + max_new_tokens)``) plus the Reasoner's
  ``reasoner_tasks_per_document x group_size x max_new_tokens``; the other methods are counted
  like GRPO (their extra turns and judge calls come on top, so it says "at least").
- Time: measured, never assumed: the median ``step_seconds`` of the newest run of the same method
  and model on that queue (``metrics.step_estimate``), scaled by the ratio of the two configs'
  token budgets. Without such a run it says so; the run page then times the first step.

>>> step_tokens("grpo", {"train": {"prompts_per_step": 2}, "rollout": {"group_size": 4, "max_new_tokens": 100}})
(8, 800, 'exact')
"""
from __future__ import annotations

from apps.runs import metrics as run_metrics
from apps.runs.models import Run


def _get(values: dict, dotted: str, default=0):
    for part in dotted.split("."):
        values = values.get(part) if isinstance(values, dict) else None
    return default if values is None else values


def step_tokens(method: str, values: dict) -> tuple[int, int, str]:
    """(sequences, most tokens generated, "exact" | "at least") of one step of a config dict."""
    prompts = int(_get(values, "train.prompts_per_step", 1))
    group = int(_get(values, "rollout.group_size", 1))
    new = int(_get(values, "rollout.max_new_tokens", 1))
    if method == "spice":
        attempts = int(_get(values, "spice.challenger_attempts", 1))
        fmt = int(_get(values, "spice.format_max_new_tokens", 0))
        tasks = int(_get(values, "spice.reasoner_tasks_per_document", 1))
        sequences = prompts * (attempts + tasks * group)
        return sequences, prompts * (attempts * (fmt + new) + tasks * group * new), "exact"
    return prompts * group, prompts * group * new, "exact" if method == "grpo" else "at least"


def estimate(method: str, model: str, values: dict, queue: str) -> dict:
    """{"sequences", "tokens", "tokens_kind", "step_seconds" | None, "total_seconds" | None, "basis", "text"}."""
    sequences, tokens, kind = step_tokens(method, values)
    steps = int(_get(values, "train.steps", 1))
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
