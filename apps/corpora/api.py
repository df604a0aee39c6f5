"""REST views of corpora (contract.md): list/create, detail with progress, add documents, search.

Every failure is JSON `{"error": ...}` with a 4xx status (apps/api/errors.py); bad files are
checked before a job is enqueued, so the upload itself answers 400 with the reason.
"""
from __future__ import annotations

from django.core.exceptions import RequestDataTooBig
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.decorators import api_view, parser_classes, permission_classes
from rest_framework.parsers import MultiPartParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from apps.accounts.roles import can, denied_message
from apps.api.errors import ERRORS, error_response
from apps.api.params import NulSafeFormParser, NulSafeJSONParser
from apps.corpora.embedder import EmbedderError
from apps.corpora.jobs import resume_ingest
from apps.corpora.models import Corpus, Ingest
from apps.corpora.parsing import IngestError
from apps.corpora.search import SearchError, search
from apps.corpora.serializers import corpus_json
from apps.corpora.uploads import accept_file, add_document, create_corpus, read_upload


# Response schemas (OpenAPI): what corpus_json, the upload and the search answer.
PROGRESS = inline_serializer("CorpusProgress", {
    "status": serializers.CharField(), "documents_done": serializers.IntegerField(),
    "documents_total": serializers.IntegerField(), "skipped_duplicates": serializers.IntegerField(),
    "errors": serializers.ListField(child=serializers.CharField()), "percent": serializers.IntegerField(),
    "job_id": serializers.CharField(), "waiting_for": serializers.CharField(allow_null=True)})
_CORPUS_FIELDS = {
    "id": serializers.IntegerField(), "name": serializers.CharField(), "description": serializers.CharField(),
    "embedder": serializers.CharField(), "embedding_dim": serializers.IntegerField(),
    "chunk_tokens": serializers.IntegerField(), "chunk_overlap": serializers.IntegerField(),
    "status": serializers.ChoiceField(choices=[c for c, _ in Corpus.Status.choices]),
    "doc_count": serializers.IntegerField(), "chunk_count": serializers.IntegerField(), "progress": PROGRESS,
    "created_at": serializers.DateTimeField()}
CORPUS = inline_serializer("Corpus", _CORPUS_FIELDS)
CORPUS_LIST = inline_serializer("CorpusList", {"results": inline_serializer("CorpusListItem", _CORPUS_FIELDS, many=True)})
UPLOAD_QUEUED = inline_serializer("UploadQueued", {
    "job_id": serializers.CharField(), "progress": PROGRESS, "warnings": serializers.ListField(child=serializers.CharField())})
DOCUMENT_ADDED = inline_serializer("DocumentAdded", {
    "documents": serializers.IntegerField(), "chunks": serializers.IntegerField(),
    "skipped_duplicates": serializers.IntegerField(), "errors": serializers.ListField(child=serializers.CharField()),
    "corpus": inline_serializer("DocumentAddedCorpus", _CORPUS_FIELDS)})
SEARCH_RESULTS = inline_serializer("SearchResults", {"results": inline_serializer("SearchHit", {
    "document_id": serializers.IntegerField(), "chunk_id": serializers.IntegerField(), "title": serializers.CharField(),
    "text": serializers.CharField(), "score": serializers.FloatField(help_text="mode's own score (fused RRF for hybrid)"),
    "matched": serializers.ListField(child=serializers.CharField(), help_text="the query's word stems the chunk holds"),
    "ranks": serializers.DictField(child=serializers.IntegerField(), help_text="rank by dense and lexical search"),
}, many=True)})
CREATE = inline_serializer("CorpusCreate", {
    "name": serializers.CharField(max_length=100), "description": serializers.CharField(required=False),
    "embedder": serializers.CharField(required=False, help_text="bundled name or a local sentence-transformers folder"),
    "chunk_tokens": serializers.IntegerField(required=False, min_value=16, max_value=254),
    "chunk_overlap": serializers.IntegerField(required=False, min_value=0),
})
DOCUMENT = inline_serializer("DocumentAdd", {
    "file": serializers.FileField(required=False, help_text=".txt .md .html .jsonl .pdf or a .zip of those"),
    "title": serializers.CharField(required=False), "text": serializers.CharField(required=False),
})


def _forbidden(perm: str) -> Response:
    return error_response(denied_message(perm), status.HTTP_403_FORBIDDEN)


def _data(request) -> dict | Response:
    try:
        data = request.data
    except RequestDataTooBig:
        return error_response("The request body is too large: upload big documents as a file (multipart `file`).",
                              status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    if not isinstance(data, dict):
        return error_response(f"The body must be a JSON object of named fields, not a {type(data).__name__}.")
    return data


@extend_schema(methods=["GET"], operation_id="corpora_list", responses={200: CORPUS_LIST, **ERRORS})
@extend_schema(methods=["POST"], operation_id="corpora_create", request=CREATE, responses={201: CORPUS, **ERRORS})
@api_view(["GET", "POST"])
@permission_classes([IsAuthenticated])
def corpora(request):
    """GET: every corpus with counts and progress. POST (admin): `name`, `description` [, `embedder`,
    `chunk_tokens`, `chunk_overlap`] -> 201 with the corpus."""
    if request.method == "GET":
        Ingest.reap_stale()  # an ingest whose worker died shows as failed (and resumable) at once
        return Response({"results": [corpus_json(c) for c in Corpus.objects.all()]})
    if not can(request.user, "upload_corpus"):
        return _forbidden("upload_corpus")
    data = _data(request)
    if isinstance(data, Response):
        return data
    try:
        corpus = create_corpus(data.get("name", ""), data.get("description", ""), data.get("embedder") or None,
                               data.get("chunk_tokens", 200), data.get("chunk_overlap", 40))
    except (IngestError, EmbedderError) as exc:
        return error_response(str(exc))
    return Response(corpus_json(corpus), status=status.HTTP_201_CREATED)


@extend_schema(operation_id="corpora_detail", responses={200: CORPUS, **ERRORS})
@api_view(["GET"])
def corpus_detail(request, pk: int):
    Ingest.reap_stale()
    return Response(corpus_json(get_object_or_404(Corpus, pk=pk)))


@extend_schema(operation_id="corpora_resume", request=None, responses={202: UPLOAD_QUEUED, **ERRORS})
@api_view(["POST"])
def corpus_resume(request, pk: int):
    """Resume the corpus's last ingest when it failed part-way (its worker died, or the job broke): it is
    queued again and continues from what is stored (stored documents are recognised and skipped).
    409 when there is nothing to resume, saying why and what to do."""
    if not can(request.user, "upload_corpus"):
        return _forbidden("upload_corpus")
    corpus = get_object_or_404(Corpus, pk=pk)
    Ingest.reap_stale()
    try:
        resume_ingest(corpus)
    except IngestError as exc:
        return error_response(str(exc), status.HTTP_409_CONFLICT)
    corpus.refresh_from_db()
    return Response({"job_id": corpus.job_id, "progress": corpus.progress(), "warnings": []},
                    status=status.HTTP_202_ACCEPTED)


@extend_schema(operation_id="corpora_documents_add", request={"multipart/form-data": DOCUMENT, "application/json": DOCUMENT},
               responses={201: DOCUMENT_ADDED, 202: UPLOAD_QUEUED, **ERRORS})
@api_view(["POST"])
@parser_classes([MultiPartParser, NulSafeFormParser, NulSafeJSONParser])
def documents(request, pk: int):
    """Multipart `file` -> 202 with the ingestion job and progress; JSON `title`,`text` -> 201, ingested now."""
    if not can(request.user, "upload_corpus"):
        return _forbidden("upload_corpus")
    corpus = get_object_or_404(Corpus, pk=pk)
    data = _data(request)
    if isinstance(data, Response):
        return data
    try:
        uploaded = request.FILES.get("file")
        if uploaded is not None:
            result = accept_file(corpus, uploaded.name, read_upload(uploaded))
            result.pop("stored")
            return Response(result, status=status.HTTP_202_ACCEPTED)
        if "text" not in data and "title" not in data:
            return error_response("Send a multipart `file`, or JSON with `title` and `text`.")
        stats = add_document(corpus, data.get("title"), data.get("text"))
    except (IngestError, EmbedderError) as exc:
        return error_response(str(exc))
    corpus.refresh_from_db()
    return Response({**stats, "corpus": corpus_json(corpus)}, status=status.HTTP_201_CREATED)


@extend_schema(operation_id="corpora_search", responses={200: SEARCH_RESULTS, **ERRORS}, parameters=[
    OpenApiParameter("q", str, required=True), OpenApiParameter("k", int, description="1..50, default 5"),
    OpenApiParameter("mode", str, enum=["hybrid", "dense", "lexical"])])
@api_view(["GET"])
def corpus_search(request, pk: int):
    """`?q=&k=5&mode=hybrid|dense|lexical` -> {"results": [{document_id, chunk_id, title, text, score, matched,
    ranks}]}: ``matched`` the query's word stems the chunk holds, ``ranks`` its rank by meaning (dense) and by
    words (lexical)."""
    corpus = get_object_or_404(Corpus, pk=pk)
    params = request.query_params
    try:
        hits = search(corpus, params.get("q", ""), params.get("k", 5), params.get("mode", "hybrid"))
    except (SearchError, EmbedderError) as exc:
        return error_response(str(exc))
    return Response({"results": [h.to_dict() for h in hits]})
