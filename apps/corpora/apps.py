from django.apps import AppConfig


class CorporaConfig(AppConfig):
    name = "apps.corpora"
    label = "corpora"

    def ready(self):
        # Chunk's HNSW index is on an expression with an operator class, `((embedding)::halfvec(384))
        # halfvec_cosine_ops`. Django writes that correctly only when OpClass is an index-expression
        # wrapper, which django.contrib.postgres registers in its own ready(); that app is not
        # installed here, so register the same wrappers (Django's OrderBy and Collate, plus OpClass).
        from django.contrib.postgres.indexes import OpClass
        from django.db.models import OrderBy
        from django.db.models.functions import Collate
        from django.db.models.indexes import IndexExpression

        IndexExpression.register_wrappers(OrderBy, OpClass, Collate)

        from apps.corpora.models import Ingest
        from apps.jobs.reaper import register

        register("ingests", "ingest(s)", Ingest.reap_stale, Ingest.any_active)
