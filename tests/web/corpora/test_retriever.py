"""The trainer-facing Retriever and DocumentSource over Postgres."""
import random

import numpy as np

from apps.corpora.ingest import ingest_documents
from apps.corpora.parsing import ParsedDoc
from apps.corpora.retriever import PgDocumentSource, PgvectorRetriever
from trainer.tools import Document, DocumentSource
from trainer.tools.retriever import Passage, Retriever

from .conftest import DOCS


def test_the_retriever_answers_a_batch_with_passages(corpus):
    ingest_documents(corpus, [ParsedDoc(t, x, "t") for t, x in DOCS.values()])
    retriever = PgvectorRetriever(corpus)
    assert isinstance(retriever, Retriever)
    results = retriever.search(["volcano eruption in Iceland", "", "Sicilian chess opening"], k=2)
    assert len(results) == 3 and results[1] == []
    assert all(isinstance(p, Passage) for p in results[0] + results[2]) and len(results[0]) == 2
    assert results[0][0].title == "Volcanoes of Iceland" and results[2][0].title == "The Sicilian Defence"
    assert results[0][0].document_id.isdigit() and results[0][0].score > results[0][1].score
    assert PgvectorRetriever(corpus.name, mode="dense").search(["sourdough"], 1)[0][0].title == "Sourdough baking"


def test_the_document_source_samples_with_the_given_rng(corpus):
    ingest_documents(corpus, [ParsedDoc(t, x, "t") for t, x in DOCS.values()])
    source = PgDocumentSource(corpus.pk)
    assert len(source) == 3
    first = [d.id for d in source.sample(2, random.Random(7))]
    assert first == [d.id for d in source.sample(2, random.Random(7))] and len(set(first)) == 2
    many = source.sample(5, np.random.default_rng(0))
    assert len(many) == 5 and {d.title for d in many} <= {t for t, _ in DOCS.values()}
    assert all(d.text for d in many)
    assert isinstance(source, DocumentSource) and all(isinstance(d, Document) for d in many)  # the trainer's own class
