from django.contrib import admin

from apps.corpora.models import Corpus, Document


@admin.register(Corpus)
class CorpusAdmin(admin.ModelAdmin):
    list_display = ["name", "status", "doc_count", "chunk_count", "embedder", "updated_at"]
    search_fields = ["name", "description"]
    readonly_fields = ["doc_count", "chunk_count", "progress_done", "progress_total", "skipped_duplicates", "errors",
                       "job_id", "embedding_dim", "created_at", "updated_at"]


@admin.register(Document)
class DocumentAdmin(admin.ModelAdmin):
    list_display = ["title", "corpus", "source", "created_at"]
    list_filter = ["corpus"]
    search_fields = ["title", "source"]
    readonly_fields = ["content_hash", "created_at"]
    list_select_related = ["corpus"]
