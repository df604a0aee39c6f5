"""Corpus, Document, Chunk (pgvector HNSW cosine index, generated tsvector with a GIN index)."""

import django.contrib.postgres.indexes
import django.contrib.postgres.search
import django.db.models.deletion
import pgvector.django.indexes
import pgvector.django.vector
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [("accounts", "0002_pgvector")]

    operations = [
        migrations.CreateModel(
            name='Corpus',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=100, unique=True)),
                ('description', models.TextField(blank=True)),
                ('embedder', models.CharField(default='all-MiniLM-L6-v2', help_text='Bundled name or a local sentence-transformers model folder.', max_length=500)),
                ('embedding_dim', models.PositiveIntegerField(default=384)),
                ('chunk_tokens', models.PositiveIntegerField(default=200)),
                ('chunk_overlap', models.PositiveIntegerField(default=40)),
                ('status', models.CharField(choices=[('empty', 'Empty'), ('queued', 'Queued'), ('ingesting', 'Ingesting'), ('ready', 'Ready'), ('failed', 'Failed')], default='empty', max_length=12)),
                ('doc_count', models.PositiveIntegerField(default=0)),
                ('chunk_count', models.PositiveIntegerField(default=0)),
                ('progress_done', models.PositiveIntegerField(default=0)),
                ('progress_total', models.PositiveIntegerField(default=0)),
                ('skipped_duplicates', models.PositiveIntegerField(default=0)),
                ('errors', models.JSONField(blank=True, default=list, help_text='Messages of the last ingestion, newest last.')),
                ('job_id', models.CharField(blank=True, max_length=64)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'verbose_name_plural': 'corpora',
                'ordering': ['name'],
            },
        ),
        migrations.CreateModel(
            name='Document',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('title', models.CharField(max_length=500)),
                ('source', models.CharField(blank=True, help_text='File name (and member / line) it came from.', max_length=500)),
                ('content_hash', models.CharField(max_length=64)),
                ('metadata', models.JSONField(blank=True, default=dict)),
                ('text', models.TextField()),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('corpus', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='documents', to='corpora.corpus')),
            ],
            options={
                'ordering': ['id'],
            },
        ),
        migrations.CreateModel(
            name='Chunk',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('ordinal', models.PositiveIntegerField()),
                ('text', models.TextField()),
                ('token_start', models.PositiveIntegerField()),
                ('token_end', models.PositiveIntegerField()),
                ('embedding', pgvector.django.vector.VectorField(dimensions=384)),
                ('tsv', models.GeneratedField(db_persist=True, expression=django.contrib.postgres.search.SearchVector('text', config='english'), output_field=django.contrib.postgres.search.SearchVectorField())),
                ('corpus', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='corpora.corpus')),
                ('document', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='chunks', to='corpora.document')),
            ],
            options={
                'ordering': ['document_id', 'ordinal'],
            },
        ),
        migrations.AddConstraint(
            model_name='document',
            constraint=models.UniqueConstraint(fields=('corpus', 'content_hash'), name='corpora_document_unique_hash'),
        ),
        migrations.AddIndex(
            model_name='chunk',
            index=pgvector.django.indexes.HnswIndex(ef_construction=64, fields=['embedding'], m=16, name='corpora_chunk_embedding_hnsw', opclasses=['vector_cosine_ops']),
        ),
        migrations.AddIndex(
            model_name='chunk',
            index=django.contrib.postgres.indexes.GinIndex(fields=['tsv'], name='corpora_chunk_tsv_gin'),
        ),
        migrations.AddIndex(
            model_name='chunk',
            index=models.Index(fields=['corpus', 'document'], name='corpora_chunk_corpus_doc'),
        ),
    ]
