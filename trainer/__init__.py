"""Selfplay's training library: self-play RL recipes (SPICE, SSP, SCOPE, SCORE, pi-Play) and
plain GRPO, usable without the web platform::

    python -m trainer run examples/grpo_gsm8k.yaml --set train.steps=3 --out var/runs/demo

    import trainer
    result = trainer.run({"method": "grpo", "data": {"path": "bundled:gsm8k"}, ...})
    result.steps, result.step_seconds, result.final_checkpoint

The package never imports Django. Heavy modules (torch, transformers) load on first use, so
``import trainer.config`` stays cheap for the web's forms.
"""
from __future__ import annotations

__all__ = ["run", "RunResult", "load_config", "Config", "ConfigError"]


def __getattr__(name):
    if name in ("run", "RunResult"):
        from trainer import runner

        return getattr(runner, name)
    if name in ("load_config", "Config", "ConfigError"):
        from trainer import config

        return getattr(config, name)
    raise AttributeError(f"module 'trainer' has no attribute {name!r}")
