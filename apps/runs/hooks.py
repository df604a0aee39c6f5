"""Run hooks: what other apps do at a run's moments, without apps/runs importing them.

Apps above runs (review, evals) register here from their ``AppConfig.ready()``; the run's
DjangoSink (apps/runs/sink.py) calls what is registered:

- ``on_flush(fn)``: ``fn(run_id, records)`` after each flush, with the task / rubric / grade
  records just stored (apps.review: the review sampling policy);
- ``on_control(field, fn)``: ``fn(run)`` at each step boundary; its answer fills ``field`` of the
  trainer's ``Control`` (apps.review: ``verdicts``, ``harness``);
- ``on_checkpoint(fn)``: ``fn(run_id, step, path)`` after a checkpoint is recorded (apps.evals:
  automatic evaluations);
- ``on_import(fn)``: ``fn(run, folder) -> dict`` of counts, when ``manage.py import_run`` has stored
  a run folder's run, metrics, samples and checkpoints (apps/runs/importer.py), inside its
  transaction (apps.evals: evals.jsonl, eval_samples/ and crossplay.json);
- ``on_watchdog(fn)``: ``fn(run, rule, data, cfg)`` when a watchdog rule fires (apps/runs/watchdog.py; ``data``
  is its event's data, ``cfg`` the run's WatchdogConfig) (apps.review: a collapsed task family's tasks go to the
  review queue);
- ``on_heldout(fn)``: ``fn(run) -> {step: score}``, the run's held-out scores by step for the watchdog's
  reward_heldout_divergence rule when the run reports no held-out metric (apps.evals: the scores of its
  checkpoint evaluations); the first non-empty answer is used.

A hook that raises never stops a run: the sink logs it and goes on (see the sink for each case).
An import hook that raises (a bad line) fails the import, which then leaves nothing behind.
Registering the same function twice keeps one.
"""
from __future__ import annotations

from typing import Callable

FLUSH: list[Callable] = []
CONTROL: dict[str, Callable] = {}
CHECKPOINT: list[Callable] = []
IMPORT: list[Callable] = []
WATCHDOG: list[Callable] = []
HELDOUT: list[Callable] = []


def on_flush(fn: Callable) -> Callable:
    if fn not in FLUSH:
        FLUSH.append(fn)
    return fn


def on_control(field: str, fn: Callable) -> Callable:
    CONTROL[field] = fn
    return fn


def on_checkpoint(fn: Callable) -> Callable:
    if fn not in CHECKPOINT:
        CHECKPOINT.append(fn)
    return fn


def on_import(fn: Callable) -> Callable:
    if fn not in IMPORT:
        IMPORT.append(fn)
    return fn


def on_watchdog(fn: Callable) -> Callable:
    if fn not in WATCHDOG:
        WATCHDOG.append(fn)
    return fn


def on_heldout(fn: Callable) -> Callable:
    if fn not in HELDOUT:
        HELDOUT.append(fn)
    return fn
