from django.db import migrations


class Migration(migrations.Migration):
    """The pgvector extension, which corpora's embeddings need."""

    dependencies = [("accounts", "0001_roles")]
    operations = [migrations.RunSQL("CREATE EXTENSION IF NOT EXISTS vector;", migrations.RunSQL.noop)]
