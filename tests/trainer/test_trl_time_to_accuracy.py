"""benchmarks/gpu/trl_gsm8k.py (issue 22 item 3): TRL's reward is ours, its prompts are read as ours, and the
comparison finds the time ours takes to reach TRL's final accuracy. TRL itself runs on the GPU machine; these
parts need neither TRL nor a GPU."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.runfolder import append_eval

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu" / "trl_gsm8k.py"


@pytest.fixture(scope="module")
def tta():
    spec = importlib.util.spec_from_file_location("trl_gsm8k", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record(step, seconds, score, bench="gsm8k_heldout"):
    return {"step": step, "checkpoint": f"ck{step}", "benchmark": bench, "scoring": "math", "n": 659, "score": score,
            "ci_low": max(0.0, score - 0.03), "ci_high": min(1.0, score + 0.03), "seconds": 10.0,
            "train_seconds": seconds}


def test_the_reward_is_ours_on_trl_completions(tta):
    completions = [[{"role": "assistant", "content": "so the total is \\boxed{18}"}],
                   [{"role": "assistant", "content": "she pays 3 + 4 = 7 dollars"}],
                   [{"role": "assistant", "content": "\\boxed{1,000}"}],
                   [{"role": "assistant", "content": "no number here"}]]
    assert tta.gsm8k_math(completions, answer=["18", "7", "1000", "5"], prompts=None) == [1.0, 1.0, 1.0, 0.0]


def test_prompts_are_one_user_turn_and_bad_lines_are_named(tta, tmp_path):
    good = tmp_path / "train.jsonl"
    good.write_text(json.dumps({"id": "gsm8k-0", "prompt": "Q?", "answer": 18}) + "\n\n")
    assert tta.read_prompts(str(good)) == [{"prompt": [{"role": "user", "content": "Q?"}], "answer": "18"}]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "Q?", "answer": "1"}) + "\n" + json.dumps({"question": "Q?"}) + "\n")
    with pytest.raises(tta.UsageError, match="line 2"):
        tta.read_prompts(str(bad))


def test_compare_times_ours_to_trls_final_accuracy(tta):
    ours = [record(0, 0.0, 0.279), record(20, 133.5, 0.294), record(40, 260.2, 0.325), record(60, 385.4, 0.313)]
    trl = [record(0, 0.0, 0.279), record(6, 121.0, 0.285), record(12, 243.0, 0.30), record(29, 600.0, 0.31)]
    result = tta.compare(ours, trl)
    assert result["trl_final"]["score"] == 0.31
    assert result["ours_reach_s"] == 260.2  # the first checkpoint of ours at or above 31% (29.4% at 133.5 s is not)
    assert result["ratio"] == pytest.approx(260.2 / 600.0)
    interp = 133.5 + (0.31 - 0.294) / (0.325 - 0.294) * (260.2 - 133.5)
    assert result["ours_reach_interp_s"] == pytest.approx(interp)
    assert [row["t"] for row in result["table"]] == [0, 121, 133.5, 243, 260.2, 385.4, 600]  # every checkpoint time
    at_243 = result["table"][3]
    assert at_243["ours"]["step"] == 20 and at_243["trl"]["step"] == 12  # each run's latest checkpoint by then
    fixed = tta.compare(ours, trl, every=120)["table"]
    assert [row["t"] for row in fixed] == [0, 120, 240, 360, 480, 600]
    assert fixed[2]["trl"]["step"] == 6  # TRL's step 12 came at 243 s, after the 240 s mark
    assert tta.compare(ours, [record(0, 0.0, 0.279), record(9, 300.0, 0.40)], every=120)["ratio"] is None


def test_compare_command_reads_both_run_folders(tmp_path):
    trl = tmp_path / "trl"
    for row in (record(0, 0.0, 0.2792), record(7, 125.0, 0.29), record(30, 610.0, 0.3247)):
        append_eval(trl, row)
    out = subprocess.run([sys.executable, str(SCRIPT), "compare", "--trl", str(trl)], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.split("RESULT ", 1)[1])["time_to_accuracy"]
    # ours (examples/runs/grpo-gsm8k-qwen05-lr1e-6): 32.47% first at step 40, 260.2 s of training
    assert result["ours_reach_s"] == 260.2 and result["ratio"] == pytest.approx(260.2 / 610.0)
    assert "| 610 |" in out.stdout and "| 802 |" in out.stdout


def test_bad_input_is_one_line_not_a_traceback(tmp_path):
    out = subprocess.run([sys.executable, str(SCRIPT), "compare", "--trl", str(tmp_path)], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr and "need evaluations" in out.stderr
    out = subprocess.run([sys.executable, str(SCRIPT), "train", "--run", str(tmp_path / "r"), "--model",
                          str(tmp_path / "nothing"), "--minutes", "1"], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr and "no config.json" in out.stderr
