"""The task ledger: difficulty histogram, invalid share and near-duplicate rate, from real Task rows."""
import pytest

from apps.episodes import near_duplicates as nd
from apps.episodes.models import Task
from apps.runs import ledger
from apps.runs.models import Run

pytestmark = pytest.mark.django_db


def test_shingle_jaccard_and_duplicate_flags_by_hand():
    # "abcdef" 3-grams: abc bcd cde def; "abcdeg": abc bcd cde deg -> 3 shared of 5 distinct = 0.6
    assert nd.jaccard(nd.shingles("abcdef", 3), nd.shingles("abcdeg", 3)) == pytest.approx(0.6)
    assert nd.shingles("  A  b ", 5) == frozenset({"a b"})  # shorter than k: the whole text
    assert nd.jaccard(frozenset(), frozenset()) == 0.0
    texts = ["What is the capital of France?", "what is the capital of  France ?",
             "Name the longest river in Africa.", "What is the capital of France?"]
    assert nd.near_duplicate_flags(texts, 0.7, window=100) == [False, True, False, True]
    # a window of 1 only looks at the question just before: the last one no longer matches
    assert nd.near_duplicate_flags(texts, 0.7, window=1) == [False, True, False, False]


def test_pass_rates_fall_in_their_bins():
    assert [ledger.bin_of(r) for r in (0.0, 0.1, 0.49, 0.5, 0.95, 1.0, 1.3, -0.2)] == [0, 1, 4, 5, 9, 9, 9, 0]


def _task(run, key, step, pass_rate=None, valid=True, question=None, role="challenger"):
    return Task(run=run, key=key, step=step, role=role, valid=valid, pass_rate=pass_rate,
                question=question if question is not None else f"distinct question number {key} about topic {key * 7}")


def test_ledger_counts_from_the_database():
    run = Run.objects.create(method="spice", model_name="tiny", config={})
    other = Run.objects.create(method="spice", model_name="tiny", config={})
    rows = [
        _task(run, "1:0", 1, 0.0), _task(run, "1:1", 1, 0.5), _task(run, "1:2", 1, None, valid=False),
        _task(run, "2:0", 2, 0.5), _task(run, "2:1", 2, 1.0), _task(run, "2:2", 2, 0.25),
        _task(run, "2:3", 2, None, valid=False, question="distinct question number 2:0 about topic 2:02:0"),
        _task(other, "1:0", 1, 0.5, valid=False),  # another run's task is not counted
    ]
    Task.objects.bulk_create(rows)
    d = ledger.ledger(run)
    assert d["tasks"] == 7 and d["invalid"] == 2 and d["invalid_share"] == pytest.approx(2 / 7)
    assert d["graded"] == 5 and d["target"] == 0.5
    counts = {b["lo"]: b["all"] for b in d["bins"]}
    assert counts[0.0] == 1 and counts[0.2] == 1 and counts[0.5] == 2 and counts[0.9] == 1 and sum(counts.values()) == 5
    assert d["near_target"] == 3  # 0.25, 0.5, 0.5 are inside [0.25, 0.75]; 0.0 and 1.0 are not
    assert d["steps"] == [1, 2]
    assert d["invalid_share_by_step"] == [pytest.approx(1 / 3), pytest.approx(1 / 4)]
    assert d["pass_rate_by_step"] == [pytest.approx(0.25), pytest.approx((0.5 + 1.0 + 0.25) / 3)]
    dups = d["duplicates"]
    assert dups["checked"] == 7 and dups["duplicates"] == 1  # 2:3 repeats 2:0's question almost exactly
    assert dups["steps"] == [1, 2] and dups["rate_by_step"] == [0.0, pytest.approx(1 / 4)]
    assert "Jaccard" in dups["method"] and "not embeddings" in dups["method"]


def test_recent_histogram_covers_only_the_latest_steps(monkeypatch):
    monkeypatch.setattr(ledger, "RECENT_STEPS", 2)
    run = Run.objects.create(method="spice", model_name="tiny", config={})
    Task.objects.bulk_create([_task(run, f"{s}:0", s, 0.0 if s < 3 else 0.9) for s in range(1, 5)])
    d = ledger.ledger(run)
    assert d["recent_steps"] == [3, 4]
    assert [b["recent"] for b in d["bins"]] == [0] * 9 + [2]
    assert [b["all"] for b in d["bins"]] == [2] + [0] * 8 + [2]


def test_an_empty_run_has_an_empty_ledger(client, researcher):
    run = Run.objects.create(method="spice", model_name="tiny", config={}, owner=researcher)
    d = ledger.ledger(run)
    assert d["tasks"] == 0 and d["invalid_share"] is None and d["duplicates"]["rate"] is None
    assert d["recent_steps"] is None and all(b["all"] == 0 for b in d["bins"])
    client.force_login(researcher)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="task-ledger"' in html and 'id="ledger-invalid">—<' in html


def test_the_run_page_and_the_ledger_endpoint_show_the_ledger(client, researcher):
    run = Run.objects.create(method="spice", model_name="tiny", config={}, owner=researcher)
    Task.objects.bulk_create([_task(run, "1:0", 1, 0.5), _task(run, "1:1", 1, None, valid=False),
                              _task(run, "1:2", 1, 0.5, question="distinct question number 1:0 about topic 1:01:0"),
                              _task(run, "1:3", 1, 1.0)])
    client.force_login(researcher)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="ledger-invalid">25%<' in html and 'id="ledger-dups">25%<' in html
    assert 'id="ledger-target">67%<' in html  # 2 of 3 graded tasks at 50%
    assert "character 5-gram Jaccard" in html and 'id="ledger-data"' in html
    data = client.get(f"/runs/{run.pk}/ledger/").json()
    assert data["tasks"] == 4 and data["duplicates"]["duplicates"] == 1
    assert client.get("/runs/999999/ledger/").status_code == 404


def test_minhash_flags_agree_with_exact_jaccard_on_planted_near_duplicates():
    import random

    rng = random.Random(7)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(2000)]
    texts = []
    for _ in range(150):
        words = [rng.choice(vocab) for _ in range(rng.randint(8, 60))]
        texts.append(" ".join(words))
        if rng.random() < 0.5:  # a copy with some words changed: similarities spread around the threshold
            for _ in range(rng.randint(0, max(1, len(words) // 3))):
                words[rng.randrange(len(words))] = rng.choice(vocab)
            texts.append(" ".join(words))
    rng.shuffle(texts)
    sets = [nd.shingles(t) for t in texts]
    exact = [any(nd.jaccard(sets[i], sets[j]) >= 0.7 for j in range(max(0, i - 100), i)) for i in range(len(texts))]
    assert 5 < sum(exact) < len(texts) // 2
    assert nd.near_duplicate_flags(texts, 0.7, 100) == exact
    # the shingle hashes count the same k-grams as the sets
    assert [len(nd.shingle_hashes(t)) for t in texts[:20]] == [len(s) for s in sets[:20]]
