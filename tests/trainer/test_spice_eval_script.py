"""benchmarks/gpu/spice_eval.py end to end on the tiny model: a one-step SPICE run's base and checkpoint,
cross-play + GSM8K-format + cloze records in the run folder in the formats import_run reads, a rerun
that finds nothing left to do, --time-limit, and bad input as one line with exit 2."""
import json
import sys
from pathlib import Path

import pytest

from trainer.runfolder import read_crossplay, read_evals

SCRIPTS = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"


@pytest.fixture
def spice_eval(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    monkeypatch.syspath_prepend(str(SCRIPTS))
    for name in ("common", "spice_eval"):
        sys.modules.pop(name, None)
    import spice_eval

    return spice_eval


@pytest.fixture
def run_folder(tiny_config, tmp_path):
    from trainer import run

    docs = tmp_path / "docs.jsonl"
    rows = [{"id": f"h{i}", "title": f"Town {i}", "text": f"The town of Alder {i} has {100 + i} houses. "
             f"It was founded by Maria Brandt in {1800 + i} near the river Osk."} for i in range(4)]
    docs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = tiny_config("spice", corpus={"path": str(docs)}, train={"steps": 1, "prompts_per_step": 2},
                      spice={"challenger_attempts": 2, "challenger_group_size": 2, "format_max_new_tokens": 16,
                             "max_document_tokens": 64},
                      rollout={"max_new_tokens": 8, "group_size": 2, "temperature": 1.0})
    result = run(cfg, run_dir=tmp_path / "run")
    gsm = tmp_path / "gsm.jsonl"
    gsm.write_text(json.dumps({"question": "What is 2 + 3?", "answer": "5"}) + "\n"
                   + json.dumps({"question": "What is 4 + 4?", "answer": "8"}) + "\n")
    return tmp_path / "run", result.final_checkpoint, docs, gsm


def test_the_script_fills_the_run_folder_and_resumes(spice_eval, run_folder, tiny_model_dir, capsys):
    run, ckpt, docs, gsm = run_folder
    argv = ["--run", str(run), "--models", f"base:{tiny_model_dir}", str(ckpt), "--docs", str(docs), "--tasks", "2",
            "--answers", "2", "--gsm8k", str(gsm), "--cloze", "2", "--max-new-tokens", "16"]
    assert spice_eval.main(argv + ["--time-limit", "0"]) == 3  # nothing starts after 0 s
    assert "rerun the same command" in capsys.readouterr().out
    assert spice_eval.main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("--- ") == 2  # each model loaded once (no valid task from a random model: no pass 2)
    assert "documents cut at 64 tokens" in out  # the run's spice.max_document_tokens
    cross = read_crossplay(run)
    assert cross["challengers"] == cross["reasoners"] == ["base", "step 1"]
    assert cross["steps_challenger"] == [0, 1]
    state = [json.loads(line) for line in (run / "crossplay_state.jsonl").read_text().splitlines()]
    made = {r["label"]: r for r in state if r["kind"] == "tasks"}
    assert set(made) == {"base", "step 1"} and all(r["attempts"] >= 2 for r in made.values())
    for i, row in enumerate(cross["pass_rate"]):  # a cell is computed exactly when its Challenger wrote tasks
        valid = made[cross["challengers"][i]]["valid"]
        assert all((v is not None) == bool(valid) for v in row)
    evals = {(r["step"], r["benchmark"]): r for r in read_evals(run)}
    assert set(evals) == {(0, "gsm8k"), (0, "cloze-heldout"), (1, "gsm8k"), (1, "cloze-heldout")}
    assert evals[(0, "gsm8k")]["n"] == 2 and evals[(0, "gsm8k")]["scoring"] == "math"
    assert evals[(1, "cloze-heldout")]["n"] == 2 and evals[(1, "cloze-heldout")]["checkpoint"] == str(ckpt)
    assert (run / "eval_samples" / "gsm8k-step1.jsonl").is_file()
    assert "seconds per phase" in out and "co-evolution signature" in out
    assert spice_eval.main(argv) == 0  # all done: nothing is loaded again
    assert "--- " not in capsys.readouterr().out
    assert len(read_evals(run)) == 4


@pytest.mark.parametrize("change, says", [
    (["--docs", "/nowhere.jsonl"], "--docs: corpus file /nowhere.jsonl does not exist"),
    (["--models", "/nowhere/step-000003"], "--models /nowhere/step-000003: "),
    (["--models", "base:no-such-model"], "not found"),
    (["--run", "/nowhere"], "--run /nowhere is not a folder"),
    (["--tasks", "0"], "--tasks must be at least 1"),
])
def test_bad_input_is_one_line_and_exit_2(spice_eval, tmp_path, tiny_model_dir, capsys, change, says):
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"title": "A", "text": "Some text."}) + "\n")
    args = {"--run": str(tmp_path), "--models": f"base:{tiny_model_dir}", "--docs": str(docs)}
    args[change[0]] = change[1]
    assert spice_eval.main([x for kv in args.items() for x in kv]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1
