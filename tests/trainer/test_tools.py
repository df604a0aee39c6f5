"""The search tool side: JSONL corpus reading, chunking, BM25 ranking, the tool response
format and budget, document sampling, and the bundled Wikipedia corpus."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from trainer.tools import Passage, Retriever
from trainer.tools.bm25 import InMemoryRetriever, terms
from trainer.tools.corpus import (
    CorpusError,
    Document,
    DocumentSource,
    JsonlDocumentSource,
    bundled_wikipedia_rows,
    chunk_text,
    corpus_path,
    document_text,
    join_chunks,
    read_jsonl_corpus,
)
from trainer.tools.search import SearchTool

DOCS = [
    {"title": "Eiffel Tower", "text": "The Eiffel Tower is a wrought-iron lattice tower in Paris, France, "
                                      "designed by the engineer Gustave Eiffel and completed in 1889."},
    {"title": "Great Wall of China", "text": "The Great Wall of China is a series of fortifications built "
                                             "across the northern borders of ancient Chinese states."},
    {"title": "Photosynthesis", "text": "Photosynthesis is the process by which plants use sunlight, water "
                                        "and carbon dioxide to make glucose and release oxygen."},
    {"title": "Paris", "text": "Paris is the capital and largest city of France, on the river Seine."},
]


@pytest.fixture
def corpus_file(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    return path


def test_it_ranks_the_document_that_matches_the_query_first(corpus_file):
    retriever = InMemoryRetriever.from_jsonl(corpus_file)
    assert isinstance(retriever, Retriever)
    [hits] = retriever.search(["who designed the eiffel tower"], k=3)
    assert hits[0].title == "Eiffel Tower"
    assert all(isinstance(h, Passage) for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_it_searches_a_batch_with_one_result_list_per_query(corpus_file):
    retriever = InMemoryRetriever.from_jsonl(corpus_file)
    results = retriever.search(["plants sunlight glucose", "capital of France", "", "zzzz qqqq"], k=2)
    assert len(results) == 4
    assert results[0][0].title == "Photosynthesis"
    assert results[1][0].title == "Paris"  # "capital" and "france" both hit; Paris is shorter
    assert results[2] == [] and results[3] == []  # nothing to match -> nothing returned
    assert len(results[1]) == 2


def test_bm25_scores_match_the_formula_by_hand():
    # Two one-word passages + one two-word passage; query "apple".
    docs = [Document("a", "", "apple"), Document("b", "", "pear"), Document("c", "", "apple apple pear")]
    r = InMemoryRetriever(docs, k1=0.9, b=0.4)
    # N = 3, df(apple) = 2 -> idf = ln(1 + (3 - 2 + 0.5) / (2 + 0.5)) = ln(1.6) = 0.470004
    # avgdl = (1 + 1 + 3) / 3 = 5/3
    # doc a: tf 1, dl 1: 1 * 1.9 / (1 + 0.9 * (0.6 + 0.4 * 1 / (5/3))) = 1.9 / 1.756 = 1.082005
    # doc c: tf 2, dl 3: 2 * 1.9 / (2 + 0.9 * (0.6 + 0.4 * 3 / (5/3))) = 3.8 / 3.188 = 1.191970
    idf = np.log(1.6)
    expected = [idf * 1.9 / 1.756, 0.0, idf * 3.8 / 3.188]
    assert r.scores("apple") == pytest.approx(expected, rel=1e-9)


def test_it_chunks_long_texts_into_passages_of_the_same_document(tmp_path):
    long_text = " ".join(f"word{i}" for i in range(250)) + " zebra"
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"title": "Long", "text": long_text}) + "\n"
                    + json.dumps({"title": "Short", "text": "nothing here"}) + "\n")
    retriever = InMemoryRetriever.from_jsonl(path, chunk_words=100)
    long_passages = [p for p in retriever.passages if p.title == "Long"]
    assert len(long_passages) == 3  # 100 + 100 + 51 words
    assert len({p.document_id for p in long_passages}) == 1
    assert len({p.chunk_id for p in long_passages}) == 3
    [hits] = retriever.search(["zebra"], k=3)
    assert [h.chunk_id for h in hits] == [long_passages[-1].chunk_id]
    assert retriever.documents[0][1:] == ("Long", long_text)


def test_chunk_text_merges_a_short_tail():
    assert chunk_text("a " * 105, chunk_words=100, min_words=20) == [" ".join(["a"] * 105)]
    assert [len(c.split()) for c in chunk_text("a " * 150, chunk_words=100)] == [100, 50]
    assert chunk_text("   ") == []


def test_terms_drop_stopwords_and_punctuation():
    assert terms("The Eiffel-Tower, in PARIS!") == ["eiffel", "tower", "paris"]


@pytest.mark.parametrize("content, message", [
    ("not json\n", "not valid JSON"),
    (json.dumps({"title": "x"}) + "\n", '"text"'),
    ("\n\n", "no documents"),
])
def test_bad_corpus_files_say_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(CorpusError, match=message):
        read_jsonl_corpus(path)
    with pytest.raises(CorpusError, match="does not exist"):
        read_jsonl_corpus(tmp_path / "missing.jsonl")


def test_search_tool_formats_passages_and_respects_the_token_budget(corpus_file, smollm2_tokenizer):
    retriever = InMemoryRetriever.from_jsonl(corpus_file)
    tool = SearchTool(retriever, k=2, max_tokens=500, tokenizer=smollm2_tokenizer)
    [passages] = tool.search(["eiffel tower paris"])
    text = tool.format(passages)
    assert text.startswith("<information>Doc 1 (Title: Eiffel Tower) The Eiffel Tower")
    assert "\nDoc 2 (Title: Paris)" in text and text.endswith("</information>")
    assert tool.calls == 1
    small = SearchTool(retriever, k=3, max_tokens=10, tokenizer=smollm2_tokenizer)
    short = small.format(passages)
    inner = short[len("<information>"):-len("</information>")]
    assert len(smollm2_tokenizer.encode(inner, add_special_tokens=False)) <= 10
    assert tool.format([]) == "<information>No results found.</information>"


def test_search_tool_makes_one_retriever_call_per_batch(corpus_file):
    calls = []

    class Counting(InMemoryRetriever):
        def search(self, queries, k):
            calls.append(list(queries))
            return super().search(queries, k)

    tool = SearchTool(Counting.from_jsonl(corpus_file), k=1)
    results = tool.search(["paris", "great wall", "oxygen"])
    assert calls == [["paris", "great wall", "oxygen"]]
    assert [r[0].title for r in results] == ["Paris", "Great Wall of China", "Photosynthesis"]


def test_document_source_samples_uniformly_and_reproducibly(corpus_file):
    source = JsonlDocumentSource.from_jsonl(corpus_file)
    assert isinstance(source, DocumentSource)
    a = source.sample(3, random.Random(7))
    b = source.sample(3, random.Random(7))
    assert [d.id for d in a] == [d.id for d in b]
    assert len({d.id for d in a}) == 3  # distinct while n <= corpus size
    assert len(source.sample(10, np.random.default_rng(0))) == 10  # more than the corpus: repeats
    counts = {d.id: 0 for d in source.documents}
    rng = random.Random(0)
    for _ in range(2000):
        counts[source.sample(1, rng)[0].id] += 1
    assert all(400 < c < 600 for c in counts.values())  # 500 expected each


def test_join_chunks_stops_at_the_token_budget(smollm2_tokenizer):
    chunks = ["alpha beta gamma", "delta epsilon", "zeta eta theta iota kappa"]
    joined = join_chunks(chunks, smollm2_tokenizer, max_tokens=9)
    assert joined.startswith("alpha beta gamma")
    assert len(smollm2_tokenizer.encode(joined, add_special_tokens=False)) <= 9
    assert "zeta" not in joined
    cut = join_chunks(["one two three four five six seven eight"], smollm2_tokenizer, max_tokens=3)
    assert len(smollm2_tokenizer.encode(cut, add_special_tokens=False)) <= 3 and cut
    doc = Document("d", "T", " ".join(["word"] * 500))
    assert len(smollm2_tokenizer.encode(document_text(doc, smollm2_tokenizer, 120), add_special_tokens=False)) <= 120


def test_bundled_wikipedia_converts_to_a_searchable_corpus(tmp_path):
    rows = bundled_wikipedia_rows(limit=5)
    assert len(rows) == 5 and all(r["title"] and r["text"] for r in rows)
    path = corpus_path("bundled:wikipedia", data_dir=tmp_path)
    assert path == (tmp_path / "corpora" / "wikipedia.jsonl").resolve()
    docs = read_jsonl_corpus(path)
    assert len(docs) > 9000
    assert {"description", "topic"} <= set(docs[0].meta)
    retriever = InMemoryRetriever(docs)
    [hits] = retriever.search(["Stanley Kubrick film 2001 space odyssey"], k=3)
    assert hits[0].title == "2001: A Space Odyssey"
    with pytest.raises(CorpusError, match="unknown bundled corpus"):
        corpus_path("bundled:nope", data_dir=tmp_path)
    with pytest.raises(CorpusError, match="not a file"):
        corpus_path(tmp_path / "nope.jsonl")
