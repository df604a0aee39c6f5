"""The compare view's input: which runs (``?ids=1,2`` or ``?ids=1&ids=2``) and which metric.

Bad input becomes a ``CompareError`` whose message says what is wrong and how to fix it; the
page shows it with a 400 instead of a traceback.
"""
from __future__ import annotations

import json
import re

from django.db import connection

from apps.runs import metrics as run_metrics
from apps.runs.models import Metric, Run, flat_config

MIN_RUNS, MAX_RUNS = 2, 8


class CompareError(ValueError):
    """Unusable ``ids`` / ``metric``; the message is shown to the person."""


def parse_ids(raw: list[str]) -> list[int]:
    """Run ids from repeated and/or comma-separated values, in order, without repeats.

    >>> parse_ids(["3,1", "3", " 2 "])
    [3, 1, 2]
    """
    ids: list[int] = []
    for part in (p.strip() for value in raw for p in value.split(",")):
        if not part:
            continue
        if not part.isdecimal():
            raise CompareError(f"ids must be run numbers separated by commas (e.g. ?ids=1,2), got {part!r}.")
        if int(part) not in ids:
            ids.append(int(part))
    return ids


def runs_to_compare(raw: list[str]) -> list[Run]:
    ids = parse_ids(raw)
    if len(ids) < MIN_RUNS:
        raise CompareError(f"Pick at least {MIN_RUNS} runs to compare (tick them in the runs list), "
                           f"got {len(ids)}.")
    if len(ids) > MAX_RUNS:
        raise CompareError(f"At most {MAX_RUNS} runs can be compared at once, got {len(ids)}; untick some.")
    found = {r.pk: r for r in Run.objects.select_related("owner").filter(pk__in=ids)}
    missing = [i for i in ids if i not in found]
    if missing:
        raise CompareError(f"No run {', '.join(map(str, missing))}; check the ids in the address.")
    return [found[i] for i in ids]


def metric_choices(runs: list[Run]) -> list[str]:
    """Every metric name any of the runs reports, reward names first."""
    names = sorted({n for r in runs for n in run_metrics.metric_names(r.pk)} - set(run_metrics.AXIS_ONLY))
    first = [n for n in run_metrics.REWARD_NAMES if n in names]
    return first + [n for n in names if n not in first]


def pick_metric(requested: str | None, choices: list[str]) -> str:
    if requested:
        if requested not in choices:
            raise CompareError(f"None of these runs reports a metric named {requested!r}; "
                               f"choose one of: {', '.join(choices[:30]) or 'none yet'}.")
        return requested
    return choices[0] if choices else run_metrics.REWARD_NAMES[0]


AXES = ("step", "wall", "train")  # the compare chart's x axes: step, wall time, training time
AXIS_POINTS = 2000  # at most this many (step, time) pairs per run; the chart interpolates between them


def time_axes(runs: list[Run], points: int = AXIS_POINTS) -> dict[int, dict]:
    """Per run, what turns a step into time for the compare chart's x axis:
    ``{"steps", "train", "wall"}``, ``train`` the training seconds up to the end of each step (the sum of
    ``step_seconds``, W&B's "process" time: pauses and queueing left out) and ``wall`` the seconds from the
    run's first step's start to each step's end on the wall clock (the ``wall_clock`` stamp the trainer logs;
    pauses included), or None for a run that logged no stamps (imported folders written before the trainer
    logged them). At most ``points`` steps, evenly strided, the last kept; the chart interpolates between.

    A step's seconds are one number for all its roles (every role of a step gets the same ``step_seconds``),
    so each step counts once (its largest value).
    """
    table = Metric._meta.db_table
    sql = f"""
        WITH per_step AS (
            SELECT step, MAX(value) FILTER (WHERE name = 'step_seconds') AS secs,
                   MAX(value) FILTER (WHERE name = 'wall_clock') AS wall
            FROM {table} WHERE run_id = %s AND name IN ('step_seconds', 'wall_clock') GROUP BY step),
        summed AS (
            SELECT step, SUM(COALESCE(secs, 0)) OVER (ORDER BY step) AS train, wall, secs,
                   ROW_NUMBER() OVER (ORDER BY step) AS i, COUNT(*) OVER () AS n
            FROM per_step)
        SELECT step, train, wall, secs FROM summed
        WHERE (i - 1) %% GREATEST(1, CEIL(n::float / %s)::int) = 0 OR i = n ORDER BY step"""
    out = {}
    with connection.cursor() as cur:
        for run in runs:
            cur.execute(sql, [run.pk, points])
            rows = cur.fetchall()
            steps = [r[0] for r in rows]
            train = [round(float(r[1]), 3) for r in rows]
            wall = None
            if rows and all(r[2] is not None for r in rows):
                start = rows[0][2] - (rows[0][3] or 0.0)  # the first step's end minus its length
                wall = [round(r[2] - start, 3) for r in rows]
            out[run.pk] = {"steps": steps, "train": train, "wall": wall}
    return out


# Config keys that say how long or where a run went, not what it trained: seeds of one config may differ in them.
NOT_THE_CONFIG = ("seed", "train.time_limit_minutes", "train.steps", "checkpoint", "output_dir", "run_dir")
# When seeds repeat among runs of one config, their checkpoint settings (which mark separate launches) tell them apart.
SPLIT_BY_CHECKPOINTS = tuple(k for k in NOT_THE_CONFIG if k != "checkpoint")


def _config_key(config: dict, ignored=NOT_THE_CONFIG) -> str:
    def strip(value, prefix=""):
        if not isinstance(value, dict):
            return value
        return {k: strip(v, f"{prefix}{k}.") for k, v in value.items() if f"{prefix}{k}" not in ignored}
    return json.dumps(strip(config or {}), sort_keys=True, default=str)


def seed_of(run: Run):
    """The seed a run's config names (None when it names none)."""
    return (run.config or {}).get("seed") if isinstance(run.config, dict) else None


def _distinct_seeds(runs: list[Run]) -> bool:
    seeds = [json.dumps(seed_of(r), sort_keys=True, default=str) for r in runs]
    return len(set(seeds)) == len(seeds)


def seed_groups(runs: list[Run]) -> list[dict]:
    """Runs drawn as one band on the compare chart: ``[{"label", "runs": [pk, ...], "by"}]``, each of 2+ runs.

    Two runs are seeds of one group when they share a ``group:<name>`` tag (``by`` "tag"), else when their configs
    (each naming a ``seed``) are the same apart from it and how long they ran (``NOT_THE_CONFIG``: the time limit, the step count,
    checkpointing, paths; ``by`` "config"). A run belongs to one group at most, tags first.

    Seeds of a config group must differ: runs of one config that share a seed are repeats (or runs told apart by
    something outside the config, such as TRL's own arguments), not seeds. When seeds repeat, the runs are split by
    their checkpoint settings (ignored otherwise: they do not change learning, but they tell separate launches
    apart), and each part of 2+ runs whose seeds all differ is a group; the rest stand alone.
    """
    taken: set[int] = set()
    groups: list[dict] = []
    tagged: dict[str, list[Run]] = {}
    for run in runs:
        for tag in run.tags or []:
            if isinstance(tag, str) and tag.startswith("group:") and tag[6:].strip():
                tagged.setdefault(tag[6:].strip(), []).append(run)
                break
    for name, members in tagged.items():
        if len(members) >= 2:
            groups.append({"label": name, "runs": [r.pk for r in members], "by": "tag"})
            taken.update(r.pk for r in members)
    same: dict[str, list[Run]] = {}
    for run in runs:  # a resolved trainer config always names its seed; a run without one is not grouped by config
        if run.pk not in taken and isinstance(run.config, dict) and "seed" in run.config:
            same.setdefault(_config_key(run.config), []).append(run)
    found: list[list[Run]] = []
    for members in same.values():
        parts = [members]
        if not _distinct_seeds(members):
            split: dict[str, list[Run]] = {}
            for run in members:
                split.setdefault(_config_key(run.config, SPLIT_BY_CHECKPOINTS), []).append(run)
            parts = list(split.values())
        found += [part for part in parts if len(part) >= 2 and _distinct_seeds(part)]
    names = [f"{part[0].method} · {_common_name(part)}" for part in found]
    for part, name, apart in zip(found, names, _tell_apart(names, [part[0].config for part in found])):
        groups.append({"label": f"{name}{apart} · seeds {', '.join(str(seed_of(r)) for r in part)}",
                       "runs": [r.pk for r in part], "by": "config"})
    return groups


def _tell_apart(names: list[str], configs: list[dict], shown: int = 3) -> list[str]:
    """Each config group's label suffix: where groups share a name but not their config (a default changed between
    seeds), the settings that tell them apart, at most ``shown`` of them (" · gate.consensus_samples=5"); else ""."""
    out = [""] * len(names)
    for name in set(names):
        same = [i for i, n in enumerate(names) if n == name]
        if len(same) < 2:
            continue
        flats = [{k: v for k, v in flat_config(configs[i] or {}) if not _ignored(k)} for i in same]
        keys = sorted(k for k in set().union(*flats) if len({json.dumps(f.get(k), default=str) for f in flats}) > 1)
        if not keys:  # parts of one config split by their checkpoint settings: their seeds tell them apart
            continue
        more = len(keys) - shown
        for i, flat in zip(same, flats):
            out[i] = (" · " + ", ".join(f"{k}={_setting(flat.get(k))}" for k in keys[:shown])
                      + (f" (+{more} more)" if more > 0 else ""))
    return out


def _ignored(key: str) -> bool:
    return any(key == i or key.startswith(f"{i}.") for i in NOT_THE_CONFIG)


def _setting(value) -> str:
    return "unset" if value is None else json.dumps(value, default=str).strip('"')


def _common_name(runs: list[Run]) -> str:
    """The runs' names' common start, each name's seed token ("-seed1") left out first.

    >>> class R:
    ...     def __init__(self, name): self.name, self.imported_name = name, ""
    >>> _common_name([R("grpo-tta-seed0"), R("grpo-tta-seed1")])
    'grpo-tta'
    >>> _common_name([R("a"), R("b")])
    'same config'

    A name's own digits stay, and so does what follows the seed token ("-control"); trailing digits of the common
    start are cut only where a name goes on with a digit (a seed written as a bare number):

    >>> _common_name([R("spice-qwen15"), R("spice-qwen15-seed1")]), _common_name([R("x-seed10"), R("x-seed11")])
    ('spice-qwen15', 'x')
    >>> _common_name([R("spice-qwen15-control"), R("spice-qwen15-seed1-control")]), _common_name([R("r-3"), R("r-4")])
    ('spice-qwen15-control', 'r')
    """
    labels = [_SEED_TOKEN.sub("", r.name or r.imported_name or "") for r in runs]
    prefix = labels[0]
    for label in labels[1:]:
        while not label.startswith(prefix):
            prefix = prefix[:-1]
    if any(len(label) > len(prefix) and label[len(prefix)].isdigit() for label in labels):
        prefix = prefix.rstrip("0123456789")
    prefix = prefix.rstrip("-_ ·")
    return prefix or "same config"


_SEED_TOKEN = re.compile(r"[-_ ]?seed\d+(?=$|[-_ ])")
