"""Corpus search says it is working (a spinner while the request runs) and the server loads the corpora's embedders
at start (issue 32 item 5: the first search took 26 s with nothing on screen)."""
import pytest

from apps.corpora import embedder
from apps.corpora.ingest import ingest_documents
from apps.corpora.parsing import ParsedDoc
from tests.web.corpora.conftest import DOCS

pytestmark = pytest.mark.django_db


def test_warm_up_loads_the_embedder_of_each_corpus_with_chunks(corpus):
    assert embedder.warm_up() == []  # nothing to search yet: nothing loaded
    ingest_documents(corpus, [ParsedDoc(t, x, "t") for t, x in DOCS.values()])
    embedder.get_embedder.cache_clear()
    assert embedder.warm_up() == [corpus.embedder]
    assert embedder.get_embedder.cache_info().currsize == 1  # the search finds it loaded


def test_the_search_form_shows_a_spinner_while_it_runs(client, admin_user, corpus):
    client.force_login(admin_user)
    html = client.get(f"/corpora/{corpus.pk}/").content.decode()
    form = html.split('<form id="search"', 1)[1].split("</form>", 1)[0]
    assert 'hx-indicator="#search-spinner"' in form and 'id="search-spinner" class="htmx-indicator' in form


@pytest.mark.django_db(transaction=True)  # the warm-up reads the corpora on its own thread's connection
def test_the_server_warms_the_embedders_at_start_unless_switched_off(corpus, monkeypatch):
    """What `manage.py serve` runs as each server process starts (run_daphne -> warm_embedders): a background
    thread loads the embedder of each corpus with chunks; SELFPLAY_WARM_EMBEDDER=0 turns it off."""
    from selfplay_web.management.commands.serve import WARM_EMBEDDER_ENV, warm_embedders

    ingest_documents(corpus, [ParsedDoc(t, x, "t") for t, x in DOCS.values()])
    monkeypatch.setenv(WARM_EMBEDDER_ENV, "0")
    embedder.get_embedder.cache_clear()
    assert warm_embedders() is None
    assert embedder.get_embedder.cache_info().currsize == 0  # switched off: nothing loaded
    monkeypatch.delenv(WARM_EMBEDDER_ENV)
    thread = warm_embedders()
    assert thread is not None and thread.daemon  # the server does not wait for it
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert embedder.get_embedder.cache_info().currsize == 1  # the first search finds it loaded
    assert embedder.get_embedder.cache_info().hits == 0
    embedder.get_embedder(corpus.embedder)
    assert embedder.get_embedder.cache_info().hits == 1  # the one loaded is the corpus's own
    monkeypatch.setenv(WARM_EMBEDDER_ENV, "1")
    again = warm_embedders()  # any other value keeps it on
    assert again is not None
    again.join(timeout=120)
