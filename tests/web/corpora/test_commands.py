"""manage.py load_wikipedia / ingest / search."""
import json

import pytest
from django.core.management import CommandError, call_command

from apps.corpora.models import Corpus


def test_load_wikipedia_loads_a_subset_and_is_idempotent(db, capsys):
    call_command("load_wikipedia", "--corpus", "wiki-test", "--limit", "8")
    corpus = Corpus.objects.get(name="wiki-test")
    assert corpus.doc_count == 8 and corpus.status == "ready" and corpus.chunk_count >= 8
    call_command("load_wikipedia", "--corpus", "wiki-test", "--limit", "10")
    corpus.refresh_from_db()
    assert corpus.doc_count == 10 and corpus.skipped_duplicates == 8
    assert "+2 documents" in capsys.readouterr().out
    call_command("search", "wiki-test", "classical music of the twentieth century", "-k", "1", "--json")
    hits = json.loads(capsys.readouterr().out)["results"]
    assert hits[0]["title"] == "20th-century classical music"


def test_ingest_and_search_commands(db, tmp_path, sample_files, capsys):
    paths = []
    for name, data in sample_files.items():
        (tmp_path / name).write_bytes(data)
        paths.append(str(tmp_path / name))
    (tmp_path / "bad.txt").write_bytes(b"")
    with pytest.raises(CommandError, match="1 file"):
        call_command("ingest", "cmdcorpus", *paths, str(tmp_path / "bad.txt"))
    out, err = capsys.readouterr()
    assert "bad.txt: the file is empty" in err and "cmdcorpus': 6 documents" in out
    call_command("search", "cmdcorpus", "penguins", "--mode", "lexical")
    assert "1. paper" in capsys.readouterr().out
    with pytest.raises(CommandError, match="no corpus 'nope'"):
        call_command("search", "nope", "x")


@pytest.mark.django_db(transaction=True)
def test_load_wikipedia_enqueue_goes_to_the_named_queue(rq_queues, capsys):
    """--queue names the queue (its default is `short`, the queue of short jobs, never behind a training run)."""
    import django_rq
    from rq.worker import SimpleWorker

    call_command("load_wikipedia", "--corpus", "wiki-q", "--limit", "3", "--enqueue", "--queue", "default")
    assert "on the default queue" in capsys.readouterr().out
    assert django_rq.get_queue("cpu").count == 0 and django_rq.get_queue("short").count == 0
    assert django_rq.get_queue("default").count == 1
    django_rq.get_worker("default", worker_class=SimpleWorker).work(burst=True)
    corpus = Corpus.objects.get(name="wiki-q")
    assert corpus.doc_count == 3 and corpus.status == "ready"
    with pytest.raises(CommandError):
        call_command("load_wikipedia", "--enqueue", "--queue", "nope")
