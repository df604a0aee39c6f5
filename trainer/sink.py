"""How the trainer reports and hears.

A recipe talks to the outside world only through a ``Sink``: it reports metrics, generated
samples and checkpoints, and at every step boundary it polls ``control()`` for pause / stop
requests and human review verdicts. ``progress(step, phase)`` says where a step is while it runs
("rollout" from its start, "update" when the policy update begins; ``RecipeContext`` sends both),
so a live page can show more than "waiting" during a step of several minutes. The web side implements it on Django (``DjangoSink``);
the library ships a console sink and a JSONL sink for standalone runs.

Sample records are plain dicts with a ``kind`` and a ``key`` unique within the run
(``f"{step}:{index}"`` style), so that writes are idempotent on resume:

- ``task``:    key, role, step, question, answer, valid (bool), pass_rate (float|None),
               document_id (str|None), format (str|None), data (dict: anything method-specific,
               e.g. SPICE's answer type, SSP's filter reason, pi-Play's QCP, SCORE's harness)
- ``attempt``: key, task_key, role, step, text, reward (float), turns (list of
               {"role": "assistant"|"tool", "text": str}), passages (list of Passage dicts),
               token_ids (list[int]), loss_mask (list[int], 1 = trained, 0 = prompt/tool),
               data (dict)
- ``rubric``:  key, task_key, step, text, priority ("critical"|"important"|"bonus"), data
- ``grade``:   key, attempt_key, rubric_key (or None), step, score (float), judge_text, data
- ``event``:   key, step, message, data  (notable things: a gate failure streak, a harness update)
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

SAMPLE_KINDS = ("task", "rubric", "attempt", "grade", "event")  # the record kinds above


@dataclass
class Verdict:
    """A human review verdict handed to the recipe at a step boundary."""

    kind: str  # "task" | "rubric" | "grade"
    key: str  # the sample key the verdict is about
    verdict: str  # "approve" | "flag"
    edit: str | None = None  # an edited rubric: its new text; an edited task: JSON {"question", "answer"}
    reason: str = ""

    def task_edit(self) -> dict | None:
        """An edited task's ``{"question": ..., "answer": ...}`` (either may be missing), else None."""
        if self.kind != "task" or not self.edit:
            return None
        try:
            value = json.loads(self.edit)
        except ValueError:
            return None
        if not isinstance(value, dict):
            return None
        return {k: str(value[k]) for k in ("question", "answer") if isinstance(value.get(k), str) and value[k].strip()} or None


@dataclass
class Control:
    pause: bool = False
    stop: bool = False
    verdicts: list[Verdict] = field(default_factory=list)
    harness: dict | None = None  # SCORE: a harness edited by a person, applied at the next refresh


@runtime_checkable
class Sink(Protocol):
    def metrics(self, step: int, role: str, values: dict[str, float]) -> None: ...

    def samples(self, step: int, records: list[dict[str, Any]]) -> None: ...

    def checkpoint(self, step: int, path: str) -> None: ...

    def control(self) -> Control: ...

    def progress(self, step: int, phase: str) -> None: ...


PHASES = ("rollout", "update")  # what progress() reports, in the order a step goes through them


class NullSink:
    def metrics(self, step, role, values):
        pass

    def samples(self, step, records):
        pass

    def checkpoint(self, step, path):
        pass

    def control(self) -> Control:
        return Control()

    def progress(self, step, phase):
        pass


class ConsoleSink(NullSink):
    """One progress line per step on stderr, and one per event (e.g. what the auto settings picked)."""

    def __init__(self, total_steps: int | None = None, stream=None):
        self.total = total_steps
        self.stream = stream or sys.stderr
        self._t0 = time.monotonic()

    def metrics(self, step, role, values):
        shown = ", ".join(f"{k}={v:.4g}" for k, v in sorted(values.items())
                          if isinstance(v, (int, float)) and k != "wall_clock")  # the line starts with the time
        total = f"/{self.total}" if self.total else ""
        print(f"[step {step}{total} {time.monotonic() - self._t0:7.1f}s] {role}: {shown}", file=self.stream)

    def samples(self, step, records):
        for r in records:
            if r.get("kind") == "event":
                print(f"[step {step}] {r.get('message', 'event')}", file=self.stream)

    def checkpoint(self, step, path):
        print(f"[step {step}] checkpoint -> {path}", file=self.stream)


class JsonlSink(NullSink):
    """metrics.jsonl, samples.jsonl and checkpoints.jsonl in a run directory."""

    def __init__(self, run_dir: str | Path):
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)

    def _append(self, name, rows):
        with open(self.dir / name, "a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, default=str) + "\n")

    def metrics(self, step, role, values):
        self._append("metrics.jsonl", [{"step": step, "role": role, **values}])

    def samples(self, step, records):
        self._append("samples.jsonl", records)

    def checkpoint(self, step, path):
        self._append("checkpoints.jsonl", [{"step": step, "path": str(path)}])


class MultiSink(NullSink):
    """Fans reports out to several sinks; control comes from the first that has one."""

    def __init__(self, *sinks):
        self.sinks = [s for s in sinks if s is not None]

    def metrics(self, step, role, values):
        for s in self.sinks:
            s.metrics(step, role, values)

    def samples(self, step, records):
        for s in self.sinks:
            s.samples(step, records)

    def checkpoint(self, step, path):
        for s in self.sinks:
            s.checkpoint(step, path)

    def progress(self, step, phase):
        for s in self.sinks:
            s.progress(step, phase)

    def control(self) -> Control:
        merged = Control()
        for s in self.sinks:
            c = s.control()
            merged.pause |= c.pause
            merged.stop |= c.stop
            merged.verdicts.extend(c.verdicts)
            merged.harness = merged.harness or c.harness
        return merged
