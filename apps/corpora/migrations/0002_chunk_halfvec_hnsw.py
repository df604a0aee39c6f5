"""The chunk HNSW index moves to `embedding::halfvec(384)` (halfvec_cosine_ops): half the bytes per
element, the same recall on real embeddings (benchmarks/RESULTS.md, issue #3). The column stays a
full-precision `vector(384)`; apps/corpora/search.py orders by the same cast and scores in full precision."""

import django.contrib.postgres.indexes
import pgvector.django.indexes
from django.db import migrations

import apps.corpora.models


class Migration(migrations.Migration):

    dependencies = [
        ('corpora', '0001_initial'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='chunk',
            name='corpora_chunk_embedding_hnsw',
        ),
        migrations.AddIndex(
            model_name='chunk',
            index=pgvector.django.indexes.HnswIndex(
                django.contrib.postgres.indexes.OpClass(apps.corpora.models.AsHalfvec('embedding', dimensions=384),
                                                        name='halfvec_cosine_ops'),
                ef_construction=64, m=16, name='corpora_chunk_halfvec_hnsw'),
        ),
    ]
