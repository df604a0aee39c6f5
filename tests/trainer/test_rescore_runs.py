"""benchmarks/rescore_runs.py: recorded evaluations re-scored with the current grader (issue 35), and the shipped
examples/runs folders agree with it."""
import importlib.util
import json
import shutil
from pathlib import Path

from trainer.runfolder import read_eval_samples, read_evals

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("rescore_runs", ROOT / "benchmarks" / "rescore_runs.py")
rescore_runs = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(rescore_runs)


def test_every_shipped_evaluation_sample_has_the_current_graders_score(capsys):
    """--check exits 1 when a stored item score differs from trainer.evaluate.score_prediction's: a grader change
    that moves a verdict has to re-score examples/runs (python benchmarks/rescore_runs.py)."""
    assert rescore_runs.main(["--check"]) == 0, capsys.readouterr().out


def _folder(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "eval_samples").mkdir(parents=True)
    (run / "config.yaml").write_text("method: grpo\n")
    (run / "metrics.jsonl").write_text("")
    items = [("-3", "3"), ("1.25", "12.5"), ("7", "7"), ("1/2", "12"), ("sieben", "5")]
    for step, right in ((0, [1, 1, 1, 1, 0]), (10, [1, 1, 1, 0, 0])):  # the old grader's verdicts
        rows = [{"index": i, "id": f"q{i}", "question": "Wie viele Äpfel?", "gold": g, "prediction": p, "output": "",
                 "score": float(s), "scoring": "math"} for i, ((p, g), s) in enumerate(zip(items, right))]
        (run / "eval_samples" / f"gsm8k-step{step}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    lines = [{"step": s, "checkpoint": "x", "benchmark": "gsm8k", "scoring": "math", "n": 5, "score": v,
              "ci_low": 0.0, "ci_high": 1.0, "seconds": 1.0} for s, v in ((0, 0.8), (10, 0.6))]
    (run / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return run


def test_a_folder_graded_by_the_old_grader_is_rescored_and_its_paired_difference_recomputed(tmp_path):
    run = _folder(tmp_path)
    untouched = (run / "eval_samples" / "gsm8k-step0.jsonl").read_text(encoding="utf-8").splitlines()[2]
    assert rescore_runs.main(["--check", str(run)]) == 1  # --check writes nothing and fails
    assert read_evals(run)[0]["score"] == 0.8

    report = rescore_runs.rescore_folder(run, write=True)
    # step 0: -3 != 3, 1.25 != 12.5, 1/2 != 12 were right under the old grader; only 7 = 7 is: 1/5
    # step 10: the same three, 7 = 7 left: 1/5
    assert [(e["step"], e["items_changed"], e["after"]) for e in report["lines"]] == [(0, 3, 0.2), (10, 2, 0.2)]
    (paired,) = report["paired"]
    assert paired["before"]["diff"] == -0.2 and paired["after"]["diff"] == 0.0  # (0.6 - 0.8) -> (0.2 - 0.2)
    evals = {r["step"]: r for r in read_evals(run)}
    assert evals[0]["score"] == 0.2 and evals[0]["score_before_rescore"] == 0.8
    assert evals[0]["ci_low"] <= 0.2 <= evals[0]["ci_high"]
    samples = read_eval_samples(run / "eval_samples" / "gsm8k-step0.jsonl")
    assert [s["score"] for s in samples] == [0.0, 0.0, 1.0, 0.0, 0.0]
    assert [s["correct"] for s in samples] == [False, False, True, False, False]
    # an unchanged line stays byte for byte (here written without ASCII escapes)
    assert (run / "eval_samples" / "gsm8k-step0.jsonl").read_text(encoding="utf-8").splitlines()[2] == untouched
    assert rescore_runs.main(["--check", str(run)]) == 0  # and a second pass changes nothing


def test_an_evaluation_without_samples_is_reported_not_rescored(tmp_path):
    run = _folder(tmp_path)
    shutil.rmtree(run / "eval_samples")
    report = rescore_runs.rescore_folder(run, write=True)
    assert report["lines"] == [] and report["not_rescorable"] == [("gsm8k", 0), ("gsm8k", 10)]
    assert read_evals(run)[0]["score"] == 0.8
