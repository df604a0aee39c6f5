"""benchmarks/gpu/method_eval.py's held-out item builders (issue 31 item 3): built from the held-out Wikipedia
documents only (3000-3999 of the bundled corpus, as benchmarks/gpu/learn_assets.sh splits it), never from the
training documents (0-2999), the same items for the same seed whatever the file's order (a run and its control
make the file separately), and bad input as one line with exit 2."""
import json
import random
import re
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"


@pytest.fixture(scope="module")
def split():
    from trainer.tools.corpus import corpus_path, read_jsonl_corpus

    docs = read_jsonl_corpus(corpus_path("bundled:wikipedia"))
    return docs[:3000], docs[3000:4000]


@pytest.fixture
def method_eval(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    monkeypatch.syspath_prepend(str(SCRIPTS))
    for name in ("common", "ssp_eval", "method_eval"):
        sys.modules.pop(name, None)
    import method_eval

    return method_eval


def doc_ids(item) -> set[str]:
    return {item.meta["document_id"]} | ({item.meta["bridge_document_id"]} if "bridge_document_id" in item.meta
                                         else set())


@pytest.mark.parametrize("builder,n", [("scope_items", 200), ("score_items", 200), ("multihop_items", 200)])
def test_items_come_from_held_out_documents_only_and_repeat(method_eval, split, builder, n):
    train, heldout = split
    build = getattr(method_eval, builder)
    items = build(heldout, n, seed=0)
    assert len(items) == n  # the 1,000 held-out documents give the session's full sets
    train_ids, heldout_ids = {str(d.id) for d in train}, {str(d.id) for d in heldout}
    used = set().union(*(doc_ids(it) for it in items))
    assert used <= heldout_ids and not used & train_ids
    assert len({it.id for it in items}) == n
    reordered = list(heldout)
    random.Random(7).shuffle(reordered)
    again = build(reordered, n, seed=0)
    assert [it.to_dict() for it in again] == [it.to_dict() for it in items]
    assert [it.id for it in build(heldout, n, seed=1)] != [it.id for it in items]


def test_rubric_items_name_their_criteria_and_answers_are_in_their_documents(method_eval, split):
    _, heldout = split
    text = {str(d.id): " ".join(d.text.split()) for d in heldout}
    for it in method_eval.scope_items(heldout, 50) + method_eval.score_items(heldout, 50):
        criteria = it.rubric.split("\n")
        assert criteria == it.meta["criteria"] and len(criteria) >= 4 and it.scoring == "judge"
        facts = [c.split("that: ", 1)[1] for c in criteria if "that: " in c]
        assert facts and all(f in text[it.meta["document_id"]] for f in facts)
    for it in method_eval.multihop_items(heldout, 50):
        assert it.answer in text[it.meta["document_id"]] and "____" in it.question
        named = re.compile(r"\b" + re.escape(it.meta["bridge_title"]) + r"\b")
        assert not named.search(it.question)  # the bridge entity is named only as X


def test_make_writes_the_same_file_twice_and_bad_input_exits_2(method_eval, split, tmp_path, capsys):
    _, heldout = split
    docs = tmp_path / "heldout.jsonl"
    docs.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in heldout[:300]))
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for out in (a, b):
        assert method_eval.main(["make-multihop", "--docs", str(docs), "--n", "20", "--out", str(out)]) == 0
    assert a.read_bytes() == b.read_bytes() and a.read_text().count("\n") >= 1
    assert method_eval.main(["make-scope", "--docs", str(tmp_path / "missing.jsonl"), "--out", str(a)]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_eval_records_the_base_and_the_answering_adapter_and_resumes(method_eval, split, tiny_config, tmp_path,
                                                                      capsys):
    """A two-step SCOPE run (one Challenger, one Solver step) with separate policies (LoRA adapters) on the tiny model, then ``eval`` on rubric items
    (graded criterion by criterion by the frozen base) and on cloze items (exact match): evals.jsonl gets the base
    (step 0) and the last checkpoint's Solver adapter (step 2), eval_samples/ what import_run reads; a rerun loads nothing."""
    from trainer import run
    from trainer.runfolder import eval_sample_files, read_eval_samples, read_evals

    _, heldout = split
    docs = tmp_path / "heldout.jsonl"
    docs.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in heldout[:40]))
    cfg = tiny_config("scope", model={"policies": "separate", "lora": {"r": 4}}, corpus={"path": str(docs)},
                      train={"steps": 2, "prompts_per_step": 1}, rollout={"max_new_tokens": 8, "group_size": 2},
                      checkpoint={"every": 1, "keep_last": 1},
                      scope={"iterations": 1, "challenger_steps": 1, "solver_steps": 1,
                             "challenger_prompts_per_step": 1, "solver_prompts_per_step": 1, "scoring_rollouts": 1,
                             "filter_rollouts": 1, "candidate_rounds": 1, "max_turns": 2, "max_tool_tokens": 16,
                             "judge_max_new_tokens": 8})
    folder = tmp_path / "run"
    assert run(cfg, run_dir=folder).final_checkpoint
    rubric, cloze = tmp_path / "open.jsonl", tmp_path / "cloze.jsonl"
    assert method_eval.main(["make-scope", "--docs", str(docs), "--n", "2", "--out", str(rubric)]) == 0
    assert method_eval.main(["make-cloze", "--docs", str(docs), "--n", "2", "--out", str(cloze)]) == 0
    common = ["--run", str(folder), "--search", str(docs), "--batch-size", "2", "--max-new-tokens", "8",
              "--judge-max-new-tokens", "8"]
    assert method_eval.main(["eval", "--bench", str(rubric), "--name", "scope-open", *common]) == 0
    assert method_eval.main(["eval", "--bench", str(cloze), "--name", "scope-cloze", *common]) == 0
    evals = {(r["step"], r["benchmark"]): r for r in read_evals(folder)}
    assert set(evals) == {(0, "scope-open"), (2, "scope-open"), (0, "scope-cloze"), (2, "scope-cloze")}
    assert evals[(2, "scope-open")]["scoring"] == "judge" and evals[(2, "scope-cloze")]["scoring"] == "exact"
    assert evals[(2, "scope-open")]["checkpoint"].endswith("step-000002") and evals[(0, "scope-open")]["n"] == 2
    files = {(s, b): p for b, s, p in eval_sample_files(folder)}
    assert set(files) == set(evals)
    graded = read_eval_samples(files[(2, "scope-open")])
    assert [len(s["grades"]) for s in graded] == [4, 4]  # 3 facts + "about this subject", each graded alone
    assert all(s["score"] == sum(s["grades"]) / 4 for s in graded)
    assert all("grounded" in s and (s["grounded"] is None) == (not s["answered"]) for s in graded)
    capsys.readouterr()
    assert method_eval.main(["eval", "--bench", str(rubric), "--name", "scope-open", *common]) == 0
    assert capsys.readouterr().out.count("already recorded") == 2 and len(read_evals(folder)) == 4
    assert method_eval.main(["eval", "--bench", str(tmp_path / "none.jsonl"), "--name", "x", *common]) == 2
    # regrade: the recorded answers graded again by the run's base (no generation), as a new benchmark name
    regrade = ["regrade", "--run", str(folder), "--bench", str(rubric), "--name", "scope-open", "--limit", "1",
               "--batch-size", "3", "--judge-max-new-tokens", "4"]
    assert method_eval.main(regrade) == 0
    again = {(r["step"], r["benchmark"]): r for r in read_evals(folder) if r["benchmark"] == "scope-open-regraded"}
    assert set(again) == {(0, "scope-open-regraded"), (2, "scope-open-regraded")}
    assert all(r["n"] == 1 and r["regraded_from"] == "scope-open" and "judge_trailing_text" in r for r in again.values())
    assert again[(2, "scope-open-regraded")]["checkpoint"] == evals[(2, "scope-open")]["checkpoint"]
    files = {(s, b): p for b, s, p in eval_sample_files(folder)}
    [sample] = read_eval_samples(files[(2, "scope-open-regraded")])
    assert sample["id"] == graded[0]["id"] and sample["prediction"] == graded[0]["prediction"]
    assert len(sample["grades"]) == 4 and sample["score"] == sum(sample["grades"]) / 4
    capsys.readouterr()
    assert method_eval.main(regrade) == 0 and capsys.readouterr().out.count("already recorded") == 2
    assert method_eval.main([*regrade[:8], "2", *regrade[9:]]) == 2  # the same name for more items: refused
    assert method_eval.main([*regrade[:6], "score-reports"]) == 2  # no such evaluation recorded
    assert method_eval.main([*regrade[:4], str(tmp_path / "none.jsonl"), *regrade[5:]]) == 2  # no such bench file
    assert method_eval.main(["regrade", "--run", str(tmp_path / "none"), *regrade[3:]]) == 2  # no such run


def test_a_run_is_measured_with_the_answer_reserve_it_trained_with(method_eval, tmp_path):
    """A run folder from before rollout.answer_reserve_tokens trained without a reserve and is measured without one
    (the default would change how its base scores); a newer run's config.yaml records its setting."""
    from trainer.config import load_config, save_config

    old = Path(__file__).resolve().parents[2] / "examples" / "runs" / "score-wiki-qwen15"
    assert method_eval.trained_reserve(old, load_config(old / "config.yaml")) == 0
    for setting in (None, 256):
        cfg = load_config({"method": "score", "rollout": {"answer_reserve_tokens": setting}})
        run = tmp_path / f"run-{setting}"
        run.mkdir()
        save_config(cfg, run / "config.yaml")
        assert method_eval.trained_reserve(run, load_config(run / "config.yaml")) == setting


def test_grounding_reads_the_recorded_reports_with_their_own_passages(method_eval, tmp_path, capsys):
    """``grounding``: each step's answered reports, the share of their sentences that their own retrieved passages
    support, and the paired difference from step 0; no model. A missing evaluation exits 2."""
    from trainer.runfolder import write_eval_samples

    passage = "<information>Doc 1 (Title: Prague) Prague is the capital of the Czech Republic on the Vltava.</information>"

    def sample(i, report):
        return {"index": i, "id": f"q{i}", "question": "Write a report on Prague.", "gold": "Prague",
                "prediction": report, "answered": report is not None, "score": 0.0, "correct": False,
                "turns": [{"role": "assistant", "text": "<search>Prague</search>"}, {"role": "tool", "text": passage}]}

    good = "Prague is the capital of the Czech Republic, on the Vltava."
    bad = "Prague draws over ten million visitors each year for its famous beer."
    run = tmp_path / "run"
    write_eval_samples(run, "score-reports", 0, [sample(0, good), sample(1, good), sample(2, None)])
    write_eval_samples(run, "score-reports", 5, [sample(0, bad), sample(1, good), sample(2, bad)])
    capsys.readouterr()
    assert method_eval.main(["grounding", "--run", str(run), "--name", "score-reports"]) == 0
    rows = [json.loads(line.split(" ", 1)[1]) for line in capsys.readouterr().out.splitlines()
            if line.startswith("RESULT")]
    assert [(r["step"], r["answered"], r["grounded_share"]) for r in rows] == [(0, 2, 1.0), (5, 3, 0.3333)]
    assert [(r["step"], r.get("vs_step0")) for r in rows] == [(0, None), (5, -0.5)]  # q0 1 -> 0, q1 1 -> 1
    assert method_eval.main(["grounding", "--run", str(run), "--name", "scope-open"]) == 2
    # a stray file beside the recordings is not read; a broken recording is a one-line error, exit 2
    (run / "eval_samples" / "score-reports-step5-old.jsonl").write_text("not json\n")
    assert method_eval.main(["grounding", "--run", str(run), "--name", "score-reports"]) == 0
    (run / "eval_samples" / "score-reports-step7.jsonl").write_text("not json\n")
    capsys.readouterr()
    assert method_eval.main(["grounding", "--run", str(run), "--name", "score-reports"]) == 2
    assert "Traceback" not in capsys.readouterr().err
