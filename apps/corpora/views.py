"""Corpora pages: the list, a corpus (documents, ingestion progress, search), create, upload."""
from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from apps.accounts.roles import can, role_required
from apps.corpora.embedder import EmbedderError
from apps.corpora.forms import CorpusForm, SearchForm, UploadForm
from apps.corpora.jobs import resume_ingest
from apps.corpora.models import Corpus, Ingest
from apps.corpora.parsing import IngestError
from apps.corpora.search import SearchError, search
from apps.corpora.uploads import accept_file, create_corpus


def index(request):
    form = CorpusForm(request.POST or None) if can(request.user, "upload_corpus") else None
    return render(request, "corpora/index.html", {"corpora": Corpus.objects.all(), "form": form})


@require_POST
@role_required("upload_corpus")
def create(request):
    form = CorpusForm(request.POST)
    if form.is_valid():
        try:
            corpus = create_corpus(form.cleaned_data["name"], form.cleaned_data["description"])
        except (IngestError, EmbedderError) as exc:
            form.add_error(None, str(exc).removeprefix("name: "))
        else:
            messages.success(request, f"Corpus {corpus.name} created: upload files to fill it.")
            return redirect("corpora:detail", pk=corpus.pk)
    return render(request, "corpora/index.html", {"corpora": Corpus.objects.all(), "form": form}, status=400)


def _resumable(request, corpus) -> bool:
    """Whether the page offers Resume: the last ingest failed part-way and this user may upload."""
    last = corpus.ingests.first()
    return bool(last and not last.can_resume() and can(request.user, "upload_corpus"))


def _detail_context(request, corpus, upload_form=None):
    docs = Paginator(corpus.documents.only("id", "title", "source", "created_at").order_by("id"), 25)
    return {
        "corpus": corpus,
        "resumable": _resumable(request, corpus),
        "page": docs.get_page(request.GET.get("page")),
        "upload_form": upload_form or (UploadForm() if can(request.user, "upload_corpus") else None),
        "search_form": SearchForm(initial={"mode": "hybrid", "k": 5}),
    }


def detail(request, pk: int):
    Ingest.reap_stale()  # an ingest whose worker died shows as failed, with Resume, at once
    corpus = get_object_or_404(Corpus, pk=pk)
    return render(request, "corpora/detail.html", _detail_context(request, corpus))


@require_POST
@role_required("upload_corpus")
def upload(request, pk: int):
    corpus = get_object_or_404(Corpus, pk=pk)
    form = UploadForm(request.POST, request.FILES)
    if form.is_valid():
        try:
            accepted = accept_file(corpus, form.cleaned_data["file"].name, form.data_bytes)
        except (IngestError, EmbedderError) as exc:
            form.add_error("file", str(exc))
        else:
            messages.success(request, f"{form.cleaned_data['file'].name} accepted: ingesting in the background.")
            for warning in accepted["warnings"][:20]:  # e.g. the broken lines of a JSONL, kept out of the corpus
                messages.warning(request, f"skipped: {warning}")
            return redirect("corpora:detail", pk=corpus.pk)
    return render(request, "corpora/detail.html", _detail_context(request, corpus, form), status=400)


@require_GET
def progress(request, pk: int):
    """The progress bar partial; htmx polls it while an ingestion is queued or running."""
    Ingest.reap_stale()
    corpus = get_object_or_404(Corpus, pk=pk)
    return render(request, "corpora/_progress.html", {"corpus": corpus, "resumable": _resumable(request, corpus)})


@require_POST
@role_required("upload_corpus")
def resume(request, pk: int):
    """Queue the corpus's failed ingest again; it continues from what is stored."""
    corpus = get_object_or_404(Corpus, pk=pk)
    Ingest.reap_stale()
    try:
        resume_ingest(corpus)
    except IngestError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, "Ingest resumed: documents already stored are skipped.")
    return redirect("corpora:detail", pk=corpus.pk)


@require_GET
def search_partial(request, pk: int):
    corpus = get_object_or_404(Corpus, pk=pk)
    form = SearchForm(request.GET)
    hits, error = [], ""
    if form.is_valid():
        try:
            hits = search(corpus, form.cleaned_data["q"], form.cleaned_data["k"] or 5, form.cleaned_data["mode"] or "hybrid")
        except (SearchError, EmbedderError) as exc:
            error = str(exc)
    else:
        error = "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())
    # 200 even for an error: htmx swaps only 2xx responses, and the message must show in #results
    mode = (form.cleaned_data.get("mode") or "hybrid") if form.is_valid() else ""
    return render(request, "corpora/_results.html", {
        "hits": hits, "error": error, "corpus": corpus, "mode": mode,
        "pending": "" if hits or error else _not_searchable_yet(corpus)})


def _not_searchable_yet(corpus) -> str:
    """Why a search finds nothing in a corpus that is not ready ("" when it is)."""
    Status = Corpus.Status
    if corpus.status == Status.QUEUED:
        return (f"No results yet: this corpus's ingest is queued ({corpus.progress_done} of {corpus.progress_total} "
                "documents); its documents become searchable once a worker takes it. Search again then.")
    if corpus.status == Status.INGESTING:
        return (f"No results yet: this corpus is being ingested ({corpus.progress_done} of {corpus.progress_total} "
                "documents so far); search again when it is ready.")
    if corpus.status == Status.EMPTY or not corpus.doc_count:
        return "No results: this corpus has no documents yet. Upload some first."
    if corpus.status == Status.FAILED:
        return "No results: this corpus's last ingest failed (see its errors above); fix the upload and try again."
    return ""


def document(request, pk: int, doc_id: int):
    corpus = get_object_or_404(Corpus, pk=pk)
    doc = get_object_or_404(corpus.documents, pk=doc_id)
    return render(request, "corpora/document.html", {"corpus": corpus, "doc": doc, "chunks": doc.chunks.defer("embedding")})
