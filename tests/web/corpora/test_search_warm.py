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
