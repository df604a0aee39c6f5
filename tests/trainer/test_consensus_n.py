"""benchmarks/gpu/consensus_n.py: how many consensus readers the task gate needs, measured from K readers per task."""
import json
import sys
from itertools import combinations
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))

import consensus_n  # noqa: E402


def _by_enumeration(k: int, agree: int, n: int) -> float:
    answers = [True] * agree + [False] * (k - agree)
    draws = list(combinations(range(k), n))
    return sum(2 * sum(answers[i] for i in d) > n for d in draws) / len(draws)


@pytest.mark.parametrize("k,agree,n", [(3, 2, 1), (5, 3, 3), (7, 4, 5), (7, 2, 3), (9, 5, 1), (9, 9, 7), (6, 3, 3)])
def test_the_majority_chance_is_every_draw_of_n_readers_counted(k, agree, n):
    assert consensus_n.majority_chance(k, agree, n) == pytest.approx(_by_enumeration(k, agree, n))


def test_agreement_is_with_the_verdict_of_all_k_readers():
    k = 15
    assert consensus_n.agreement(k, 15, 1) == consensus_n.agreement(k, 0, 1) == 1.0  # unanimous either way
    assert consensus_n.agreement(k, 8, 1) == pytest.approx(8 / 15)  # valid by 8 of 15: one reader agrees 8/15
    assert consensus_n.agreement(k, 7, 1) == pytest.approx(8 / 15)  # invalid by 7 of 15: one reader disagrees 8/15
    assert consensus_n.agreement(k, 8, 15) == 1.0
    rows = consensus_n.table([15, 0, 8, 7], k, [1, 15])
    assert rows[0]["agreement"] == pytest.approx((1 + 1 + 8 / 15 + 8 / 15) / 4)
    assert rows[0]["unsure_tasks"] == 0.5 and rows[1] == {"n": 15, "agreement": 1.0, "unsure_tasks": 0.0,
                                                           "cost_vs_3": 5.0}
    with pytest.raises(ValueError):
        consensus_n.majority_chance(3, 4, 1)


def test_tasks_come_from_a_runs_samples_with_their_documents(tmp_path):
    run = ROOT / "examples" / "runs" / "spice-gate-wiki-qwen15"
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines() if line.strip()]
    read = [r for r in rows if r.get("kind") == "task" and r.get("question") and r.get("answer")
            and (r.get("data") or {}).get("reader_agrees") is not None]
    assert read, "the shipped run kept tasks the reader was asked about"
    docs = tmp_path / "docs.jsonl"
    ids = sorted({str(r["document_id"]) for r in read})
    docs.write_text("".join(json.dumps({"id": i, "title": f"T {i}", "text": f"text of {i}"}) + "\n" for i in ids[1:]))
    tasks = consensus_n.make_tasks([str(run)], str(docs))
    assert len(tasks) == sum(str(r["document_id"]) != ids[0] for r in read)  # the one without its document skipped
    assert all(t["document"] == f"text of {t['document_id']}" and t["answer"] and t["question"] for t in tasks)


def test_from_run_tasks_through_the_gate_command_with_a_real_model_to_the_table(tmp_path, smollm2_dir, capsys):
    """The three steps of the docstring, on SmolLM2 with 3 readers: the gate command reads each task 3 times and the
    table compares 1 reader with 3."""
    from trainer.__main__ import main

    doc = "Niger is a landlocked country in West Africa. Its capital is Niamey. It has 26 million people."
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in [
        {"question": "What is the capital of Niger?", "answer": "Niamey", "document": doc},
        {"question": "How many million people live in Niger?", "answer": "26", "document": doc},
        {"question": "Which city is the capital of Niger? A) Niamey B) Agadez C) Zinder D) Maradi", "answer": "A",
         "document": doc}]))
    assert main(["gate", str(tasks), "--model", str(smollm2_dir), "--answers", "1", "--max-new-tokens", "24",
                 "--set", "gate.consensus_samples=3", "--set", "gate.guess_probe=false",
                 "--set", "gate.consensus_max_new_tokens=24"]) == 0
    out = capsys.readouterr().out
    verdicts = tmp_path / "verdicts.jsonl"
    verdicts.write_text(out)
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 3 and all(round(v["reader_agreement"] * 3, 6) in (0, 1, 2, 3) for v in lines)
    # the MCQ was read with its options shuffled, as in training (seeded: the same letter every time)
    assert "shuffled_answer" not in lines[0] and lines[2]["shuffled_answer"] in "ABCD"
    assert consensus_n.main(["table", str(verdicts), "--k", "3"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("3 tasks, 3 readers each")
    assert json.loads(printed[-1])["k"] == 3
    wrong_k = tmp_path / "wrong_k.jsonl"
    wrong_k.write_text(json.dumps({"reader_agreement": 2 / 3}) + "\n")
    with pytest.raises(consensus_n.UsageError, match="not a multiple of 1/5"):
        consensus_n.read_counts(str(wrong_k), 5)
    assert consensus_n.main(["table", str(wrong_k), "--k", "5"]) == 2  # a clear error line, no traceback
    assert "not a multiple of 1/5" in capsys.readouterr().err
