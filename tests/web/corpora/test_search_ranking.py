"""Hybrid search on the bundled Wikipedia summaries: "who painted the Mona Lisa" finds the Mona Lisa
first. The Qingming Festival scroll (which says "painting" five times and is "China's Mona Lisa")
used to win: by words it ranked first without length normalization, and the fused tie (first by
meaning vs first by words) went to the lower chunk id. The search page shows ranks and the words
that matched instead of fused scores, and says why a corpus still being ingested finds nothing."""
import pytest

from apps.corpora import search
from apps.corpora.ingest import ingest_documents
from apps.corpora.models import Corpus
from apps.corpora.wikipedia import load_summaries, wikipedia_documents

pytestmark = pytest.mark.django_db

# The bundle's order (the Qingming scroll comes first, so its chunk id is the lower one), with a
# few other art and Paris articles around them.
TITLES = ["Along the River During the Qingming Festival", "Louvre", "Mona Lisa", "The Last Supper (Leonardo)",
          "Guernica (Picasso)", "Academic art", "Eiffel Tower", "Leonardo da Vinci", "Hamlet", "Monaco"]


@pytest.fixture
def wiki(db):
    index = {r.get("title"): i for i, r in enumerate(load_summaries())}
    corpus = Corpus.objects.create(name="wiki-art")
    ingest_documents(corpus, [wikipedia_documents(index[t], 1)[0] for t in sorted(TITLES, key=index.__getitem__)])
    return corpus


def test_who_painted_the_mona_lisa_finds_the_mona_lisa(wiki):
    hybrid = search.search(wiki, "who painted the Mona Lisa", 3, "hybrid")
    assert hybrid[0].title == "Mona Lisa"
    assert hybrid[0].ranks == {"dense": 1, "lexical": 1} and {"mona", "lisa", "paint"} <= set(hybrid[0].matched)
    assert search.search(wiki, "who painted the Mona Lisa", 1, "lexical")[0].title == "Mona Lisa"
    assert search.search(wiki, "who wrote Hamlet", 1, "hybrid")[0].title == "Hamlet"


def test_the_page_shows_ranks_and_matched_words_not_scores(client, reader, wiki):
    client.force_login(reader)
    html = client.get(f"/corpora/{wiki.pk}/search/?q=who+painted+the+Mona+Lisa&mode=hybrid&k=3").content.decode()
    first = html[html.index("<li"):html.index("</li>")]
    assert "Mona Lisa" in first and "#1 · by meaning: #1 · by words: #1 (lisa, mona, paint)" in first
    assert "score" not in html


def test_a_corpus_whose_ingest_is_queued_says_so(client, reader):
    corpus = Corpus.objects.create(name="waiting")
    corpus.begin_ingest(3)
    corpus.status = Corpus.Status.QUEUED
    corpus.save(update_fields=["status"])
    client.force_login(reader)
    html = client.get(f"/corpora/{corpus.pk}/search/?q=anything&mode=lexical").content.decode()
    assert "ingest is queued (0 of 3 documents)" in html and "No results." not in html
