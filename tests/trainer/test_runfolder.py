"""trainer/runfolder.py: the evaluation files scripts add to a run folder (evals.jsonl written by
``append_eval`` and ``python -m trainer.evaluate --record``, eval_samples/ by ``write_eval_samples`` and
``--record``, crossplay.json by ``write_crossplay``), and the readers ``manage.py import_run`` uses, whose
errors name the file and the line."""
from __future__ import annotations

import json

import pytest

from trainer.evaluate import append_eval, write_crossplay, write_eval_samples
from trainer.runfolder import (
    RunFolderError,
    check_run_folder,
    eval_sample_files,
    read_checkpoints,
    read_crossplay,
    read_eval_samples,
    read_evals,
    read_metrics,
    read_samples,
)

RECORD = {"step": 0, "checkpoint": "base:qwen", "benchmark": "gsm8k-660-1318", "scoring": "math", "n": 659,
          "score": 0.269, "ci_low": 0.237, "ci_high": 0.302, "seconds": 95.0}


def test_append_eval_writes_the_documented_line_and_the_last_of_a_pair_wins(tmp_path):
    append_eval(tmp_path, RECORD)
    append_eval(tmp_path, {**RECORD, "step": 100, "checkpoint": "ckpt/step-100", "score": 0.3, "ci_high": 0.34})
    append_eval(tmp_path, {**RECORD, "step": 100, "checkpoint": "ckpt/step-100", "score": 0.4, "ci_low": 0.36,
                           "ci_high": 0.44, "model": "extra keys are kept"})
    lines = [json.loads(x) for x in (tmp_path / "evals.jsonl").read_text().splitlines()]
    assert lines[0] == RECORD and len(lines) == 3
    assert lines[2]["model"] == "extra keys are kept"
    records = read_evals(tmp_path)
    assert [(r["step"], r["score"]) for r in records] == [(0, 0.269), (100, 0.4)]  # a re-evaluation replaces


@pytest.mark.parametrize("change, says", [
    ({"score": 1.5}, '"score" is a fraction in [0, 1]'),
    ({"score": 0.5, "ci_low": 0.6, "ci_high": 0.7}, "must hold the score"),
    ({"step": -1}, '"step" must be a whole number'),
    ({"n": 2.5}, '"n" must be a whole number'),
    ({"benchmark": "GSM8K held out"}, '"benchmark" \'GSM8K held out\' must be'),
    ({"scoring": "bleu"}, '"scoring" must be one of math'),
    ({"ci_low": float("nan")}, '"ci_low" must be a finite number'),
    ({"train_seconds": -3.0}, '"train_seconds" (training time up to this checkpoint) must be a number of seconds'),
    ({"train_seconds": "12 min"}, '"train_seconds" (training time up to this checkpoint) must be a number'),
])
def test_append_eval_refuses_a_bad_record_and_writes_nothing(tmp_path, change, says):
    with pytest.raises(RunFolderError, match=None) as info:
        append_eval(tmp_path, {**RECORD, **change})
    assert says in str(info.value)
    assert not (tmp_path / "evals.jsonl").exists()


def test_train_seconds_is_optional_and_read_as_a_number(tmp_path):
    append_eval(tmp_path, {**RECORD, "step": 20, "checkpoint": "ckpt/step-20", "train_seconds": 133})
    append_eval(tmp_path, {**RECORD, "train_seconds": None})
    records = read_evals(tmp_path)
    assert [(r["step"], r["train_seconds"]) for r in records] == [(0, None), (20, 133.0)]
    assert isinstance(records[1]["train_seconds"], float)


def test_append_eval_names_missing_fields(tmp_path):
    with pytest.raises(RunFolderError, match="missing ci_low, ci_high, seconds"):
        append_eval(tmp_path, {k: v for k, v in RECORD.items() if k not in ("ci_low", "ci_high", "seconds")})


def test_read_evals_names_the_file_and_line(tmp_path):
    append_eval(tmp_path, RECORD)
    with open(tmp_path / "evals.jsonl", "a") as f:
        f.write("\n" + json.dumps({**RECORD, "n": "many"}) + "\n")
    with pytest.raises(RunFolderError, match=r'^evals.jsonl line 3: "n" must be a whole number'):
        read_evals(tmp_path)


def test_write_crossplay_round_trips_a_non_square_matrix(tmp_path):
    path = write_crossplay(tmp_path, ["base", "step 50", "step 100"], ["base", "step 100"], [0, 50, 100], [0, 100],
                           [[0.5, 0.7], [0.3, None], [0.1, 0.4]], [[32, 32], [32, 0], [30, 30]])
    assert path == tmp_path / "crossplay.json"
    data = read_crossplay(tmp_path)
    assert data == {"challengers": ["base", "step 50", "step 100"], "reasoners": ["base", "step 100"],
                    "steps_challenger": [0, 50, 100], "steps_reasoner": [0, 100],
                    "pass_rate": [[0.5, 0.7], [0.3, None], [0.1, 0.4]], "n": [[32, 32], [32, 0], [30, 30]]}
    assert read_crossplay(tmp_path / "nowhere") is None


@pytest.mark.parametrize("args, says", [
    ((["a", "b"], ["a"], [0, 1], [0], [[0.5], [0.5], [0.5]], [[1], [1], [1]]), '"pass_rate" must be 2 rows'),
    ((["a"], ["a", "b"], [0], [0, 1], [[0.5, 0.5]], [[1]]), '"n" must be 1 rows (challengers) of 2 values'),
    ((["a"], ["a"], [0, 1], [0], [[0.5]], [[1]]), '"steps_challenger" has 2 entries for 1 challengers'),
    ((["a"], ["a"], [0], [0], [[1.5]], [[1]]), '"pass_rate"[0][0] must be a fraction'),
    ((["a"], ["a"], [0], [-3], [[0.5]], [[1]]), '"steps_reasoner" must be whole numbers'),
    (([], ["a"], [], [0], [], []), '"challengers" must be a non-empty list'),
])
def test_write_crossplay_refuses_a_bad_shape(tmp_path, args, says):
    with pytest.raises(RunFolderError) as info:
        write_crossplay(tmp_path, *args)
    assert says in str(info.value)
    assert not (tmp_path / "crossplay.json").exists()


def test_read_crossplay_reports_bad_json(tmp_path):
    (tmp_path / "crossplay.json").write_text('{"challengers": [')
    with pytest.raises(RunFolderError, match="^crossplay.json: not valid JSON"):
        read_crossplay(tmp_path)


def test_check_run_folder_names_what_is_missing(tmp_path):
    with pytest.raises(RunFolderError, match="is not a folder"):
        check_run_folder(tmp_path / "nope")
    (tmp_path / "metrics.jsonl").write_text("")
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(RunFolderError) as info:
        check_run_folder(tmp_path)
    assert "is not a run folder: it has no config.yaml" in str(info.value)
    assert "it holds: metrics.jsonl, notes.txt" in str(info.value)


def test_readers_name_file_and_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "role": "solver", "loss": 0.5}\n{"role": "solver"}\n')
    with pytest.raises(RunFolderError, match=r'^metrics.jsonl line 2: "step" must be a whole number'):
        list(read_metrics(tmp_path))
    (tmp_path / "samples.jsonl").write_text('{"kind": "task", "key": "1:0", "step": 1}\n\n[1, 2]\n')
    with pytest.raises(RunFolderError, match="^samples.jsonl line 3: expected a JSON object, got list"):
        list(read_samples(tmp_path))
    (tmp_path / "samples.jsonl").write_text('{"kind": "task", "key": "1:0", "step": 1}\n{"kind": "task", "ke')
    with pytest.raises(RunFolderError, match=r"^samples.jsonl line 2: not valid JSON .*cut off"):
        list(read_samples(tmp_path))
    (tmp_path / "samples.jsonl").write_text('{"kind": "answer", "key": "1:0"}\n')
    with pytest.raises(RunFolderError, match='^samples.jsonl line 1: "kind" must be one of task, rubric'):
        list(read_samples(tmp_path))
    (tmp_path / "checkpoints.jsonl").write_text('{"step": 2}\n')
    with pytest.raises(RunFolderError, match='^checkpoints.jsonl line 1: "path" must be the checkpoint folder'):
        read_checkpoints(tmp_path)


def test_read_checkpoints_joins_the_list_and_the_folders(tmp_path):
    (tmp_path / "checkpoints.jsonl").write_text('{"step": 1, "path": "/gpu/run/checkpoints/step-000001"}\n'
                                                '{"step": 2, "path": "/gpu/run/checkpoints/step-000002"}\n')
    (tmp_path / "checkpoints" / "step-000002").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step-000003").mkdir()
    assert read_checkpoints(tmp_path) == {1: "/gpu/run/checkpoints/step-000001",
                                          2: str(tmp_path / "checkpoints" / "step-000002"),
                                          3: str(tmp_path / "checkpoints" / "step-000003")}


def test_evaluate_command_records_into_the_run_folder(tiny_model_dir, tmp_path, capsys):
    """python -m trainer.evaluate ... --record DIR appends the real evaluation's line."""
    from trainer.evaluate import main

    bench = tmp_path / "Arith.jsonl"
    bench.write_text("".join(json.dumps({"question": f"What is {a} + 1?", "answer": str(a + 1)}) + "\n"
                             for a in range(3)))
    run = tmp_path / "run"
    assert main([str(tiny_model_dir), "--benchmark", str(bench), "--max-new-tokens", "3", "--record", str(run),
                 "--step", "0"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    [record] = read_evals(run)
    assert record["benchmark"] == "arith" and record["step"] == 0 and record["checkpoint"] == str(tiny_model_dir)
    assert (record["n"], record["score"], record["ci_low"], record["ci_high"]) == \
        (3, printed["score"], printed["ci_low"], printed["ci_high"])
    # and its items, for the web's paired difference from the base model
    assert [(b, s) for b, s, _ in eval_sample_files(run)] == [("arith", 0)]
    samples = read_eval_samples(run / "eval_samples" / "arith-step0.jsonl")
    assert [s["index"] for s in samples] == [0, 1, 2]
    assert sum(s["score"] for s in samples) / 3 == pytest.approx(record["score"])
    assert {"id", "question", "gold", "prediction", "output", "correct"} <= set(samples[0])
    # a model folder has no step of its own: --record asks for it before loading anything
    assert main([str(tiny_model_dir), "--benchmark", str(bench), "--record", str(run)]) == 2
    assert "give --step N" in capsys.readouterr().err


# ---- eval_samples/ ------------------------------------------------------------------------------

SAMPLE = {"index": 0, "id": "cloze-0", "question": "Who ___?", "gold": ["Ada", "Ada Lovelace"], "prediction": "Ada",
          "output": "\\boxed{Ada}", "score": 1.0, "correct": True, "scoring": "exact"}


def test_eval_samples_are_written_whole_and_read_back_by_index(tmp_path):
    samples = [{**SAMPLE, "index": 1, "id": "cloze-1", "score": 0.0, "correct": False}, SAMPLE]
    path = write_eval_samples(tmp_path, "cloze-heldout", 10, samples)
    assert path == tmp_path / "eval_samples" / "cloze-heldout-step10.jsonl"
    write_eval_samples(tmp_path, "gsm8k", 0, [SAMPLE])
    assert [(b, s) for b, s, _ in eval_sample_files(tmp_path)] == [("cloze-heldout", 10), ("gsm8k", 0)]
    back = read_eval_samples(path)
    assert [(s["index"], s["id"], s["score"], s["correct"], s["gold"]) for s in back] == \
        [(0, "cloze-0", 1.0, True, ["Ada", "Ada Lovelace"]), (1, "cloze-1", 0.0, False, ["Ada", "Ada Lovelace"])]
    assert back[0]["scoring"] == "exact"  # other keys are kept
    write_eval_samples(tmp_path, "gsm8k", 0, [])  # a re-evaluation replaces the file
    assert read_eval_samples(tmp_path / "eval_samples" / "gsm8k-step0.jsonl") == []
    # only index and score are required: the rest defaults as evaluate's samples have it
    (tmp_path / "eval_samples" / "gsm8k-step0.jsonl").write_text(json.dumps({"index": 3, "score": 1}) + "\n")
    [bare] = read_eval_samples(tmp_path / "eval_samples" / "gsm8k-step0.jsonl")
    assert bare == {"index": 3, "score": 1.0, "id": "", "question": "", "gold": "", "prediction": None, "output": "",
                    "correct": True}
    assert eval_sample_files(tmp_path / "nowhere") == []


@pytest.mark.parametrize("line, says", [
    ('{"index": 0, "score": ', "line 2: not valid JSON"),
    ('{"index": -1, "score": 1.0}', 'line 2: "index" (the item\'s position in the benchmark) must be a whole number'),
    ('{"index": 1, "score": "yes"}', 'line 2: "score" must be a number in [0, 1], got \'yes\''),
    ('{"index": 1, "score": 2}', 'line 2: "score" must be a number in [0, 1], got 2'),
    ('{"index": 1, "score": 1, "gold": 7}', 'line 2: "gold" must be text or a list of texts, got 7'),
    ('{"index": 1, "score": 1, "correct": "yes"}', 'line 2: "correct" must be true or false'),
    ('{"index": 0, "score": 1}', 'line 2: "index" 0 is on line 1 already'),
    ('[1, 2]', "line 2: expected a JSON object"),
])
def test_a_bad_eval_samples_line_is_named_with_its_file_and_line(tmp_path, line, says):
    path = write_eval_samples(tmp_path, "cloze-heldout", 10, [SAMPLE])
    with open(path, "a") as f:
        f.write(line + "\n")
    with pytest.raises(RunFolderError) as info:
        read_eval_samples(path)
    assert str(info.value).startswith(f"eval_samples/cloze-heldout-step10.jsonl {says}")


def test_an_eval_samples_file_must_be_named_after_its_evals_line(tmp_path):
    (tmp_path / "eval_samples").mkdir()
    (tmp_path / "eval_samples" / "notes.txt").write_text("not read")
    (tmp_path / "eval_samples" / "cloze-final.jsonl").write_text("")
    with pytest.raises(RunFolderError, match=r"eval_samples/cloze-final.jsonl: name it <benchmark>-step<N>.jsonl"):
        eval_sample_files(tmp_path)
    with pytest.raises(RunFolderError, match="must be 1-100 lowercase"):
        write_eval_samples(tmp_path, "Cloze", 1, [])
    with pytest.raises(RunFolderError, match="must be 1-100 lowercase"):  # ^...$ alone let a newline through
        write_eval_samples(tmp_path, "cloze\n", 1, [])
    (tmp_path / "eval_samples" / "cloze-final.jsonl").unlink()
    (tmp_path / "eval_samples" / "._cloze-step1.jsonl").write_text("macOS")  # dotfiles are not samples
    assert eval_sample_files(tmp_path) == []


def test_copy_head_keeps_whole_lines_within_the_byte_budget(tmp_path):
    from trainer.runfolder import copy_head

    src = tmp_path / "samples.jsonl"
    src.write_text('{"q": "é"}\n' * 5, encoding="utf-8")  # 12 bytes a line (é is two)
    assert copy_head(src, tmp_path / "cut.jsonl", 30) == 24
    assert (tmp_path / "cut.jsonl").read_text(encoding="utf-8") == '{"q": "é"}\n' * 2
    assert copy_head(src, tmp_path / "all.jsonl", 10_000) == 60
