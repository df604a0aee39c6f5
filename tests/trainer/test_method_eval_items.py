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
