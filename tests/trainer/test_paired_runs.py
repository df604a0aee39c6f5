"""benchmarks/paired_runs.py: a run against its base and its random-reward control, per item and paired, and
several seeds pooled per item (each item's score averaged over the seeds), checked against hand computations on
run folders written here."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import paired_runs  # noqa: E402


def _folder(path: Path, steps: dict[int, list[float]], bench="cloze") -> Path:
    (path / "eval_samples").mkdir(parents=True)
    for step, scores in steps.items():
        rows = [json.dumps({"id": f"item-{i}", "score": s}) for i, s in enumerate(scores)]
        (path / "eval_samples" / f"{bench}-step{step}.jsonl").write_text("\n".join(rows) + "\n")
    return path


def test_one_seed_against_base_and_control(tmp_path):
    run = _folder(tmp_path / "run", {0: [0, 0, 1, 0], 9: [1, 1, 1, 0]})
    ctl = _folder(tmp_path / "ctl", {0: [0, 0, 1, 0], 8: [0, 1, 0, 0]})
    (row,) = paired_runs.compare(run, ctl)
    assert (row["step"], row["control_step"], row["n"]) == (9, 8, 4)
    assert row["run_vs_base"]["diff"] == pytest.approx(0.5)  # items 0 and 1 gained
    assert row["run_vs_control"]["diff"] == pytest.approx(0.5)  # (1-0 + 1-1 + 1-0 + 0-0) / 4
    assert (row["run_vs_control"]["gained"], row["run_vs_control"]["lost"]) == (2, 0)


def test_seeds_pooled_per_item(tmp_path):
    base = [0, 0, 1, 0]
    runs = [_folder(tmp_path / "r0", {0: base, 5: [1, 1, 1, 0]}), _folder(tmp_path / "r1", {0: base, 7: [0, 0, 1, 1]})]
    ctls = [_folder(tmp_path / "c0", {0: base, 6: [0, 1, 1, 0]}), _folder(tmp_path / "c1", {0: base, 4: [0, 0, 0, 0]})]
    row, both = paired_runs.pooled(runs, ctls)
    # per item, run means (0.5, 0.5, 1, 0.5), control means (0, 0.5, 0.5, 0): run - control = mean(.5, 0, .5, .5)
    assert row["seeds"] == 2 and row["steps"] == [5, 7] and row["control_steps"] == [6, 4]
    assert row["run"] == pytest.approx(0.625) and row["control"] == pytest.approx(0.25)
    assert row["run_vs_control"]["diff"] == pytest.approx(0.375)
    assert row["run_vs_base"]["diff"] == pytest.approx(0.375)  # base 0.25 -> 0.625
    # the mean of the per-seed differences, as the pooled line must be when the seeds score the same items
    per_seed = [paired_runs.compare(r, c)[0]["run_vs_control"]["diff"] for r, c in zip(runs, ctls)]
    assert sum(per_seed) / 2 == pytest.approx(row["run_vs_control"]["diff"])
    # the second pooled line resamples the seeds too: the same means, an interval at least as wide here
    assert both["pooled"] == "seeds and items" and both["seeds"] == 2
    for key in ("run_vs_base", "control_vs_base", "run_vs_control"):
        assert both[key]["diff"] == pytest.approx(row[key]["diff"])


def test_the_two_level_interval_covers_the_spread_between_seeds():
    items = [f"i{k}" for k in range(200)]
    same = [{k: 0.1 for k in items}] * 3  # every seed +0.1 on every item: no spread anywhere
    assert paired_runs.two_level_interval(same) == {"diff": pytest.approx(0.1), "low": pytest.approx(0.1),
                                                   "high": pytest.approx(0.1), "n": 200, "seeds": 3}
    # seeds +0.3, +0.1, -0.1 on every item: no item spread, so an item-only interval is a point; resampling the
    # seeds spreads it over what three draws of them give, -0.1 .. +0.3
    apart = [{k: d for k in items} for d in (0.3, 0.1, -0.1)]
    row = paired_runs.two_level_interval(apart)
    assert row["diff"] == pytest.approx(0.1) and row["low"] < 0.0 < 0.2 < row["high"] <= 0.3 + 1e-9
    assert paired_runs.two_level_interval([{"a": 1.0}, {"b": 1.0}]) is None  # no item common to the seeds


def test_pooled_keeps_the_items_every_seed_scored_and_skips_runs_without_a_base(tmp_path):
    a = _folder(tmp_path / "a", {0: [0, 1, 0], 3: [1, 1, 0]})
    b = _folder(tmp_path / "b", {0: [0, 1], 3: [1, 0]})  # scored items 0 and 1 only
    row, _ = paired_runs.pooled([a, b], [])
    assert row["n"] == 2 and "run_vs_control" not in row
    assert row["run_vs_base"]["diff"] == pytest.approx(0.25)  # item 0: 0 -> 1; item 1: 1 -> 0.5
    c = _folder(tmp_path / "c", {3: [1, 1, 0]})  # no step 0: no base to pair with
    assert paired_runs.pooled([a, c], []) == []


def test_the_command_refuses_unmatched_controls_and_prints_a_pooled_line(tmp_path):
    runs = [_folder(tmp_path / f"r{i}", {0: [0, 1], 2: [1, 1]}) for i in range(2)]
    cmd = [sys.executable, str(ROOT / "benchmarks" / "paired_runs.py"), *map(str, runs)]
    bad = subprocess.run(cmd + ["--control", str(runs[0])], capture_output=True, text=True)
    assert bad.returncode == 2 and "2 run(s) but 1 control(s)" in bad.stderr and "Traceback" not in bad.stderr
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "cloze (pooled)" in out and '"pooled": true' in out and "cloze (seeds+items)" in out
