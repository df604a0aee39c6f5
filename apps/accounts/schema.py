"""Management commands that need the database schema check for it first (issue 20).

A command run against a database that was never migrated (``make test`` creates only the test
databases) used to die inside its first query with "relation corpora_corpus does not exist".
``SchemaCommand`` is a ``BaseCommand`` that first looks for unapplied migrations and, when there are
any, stops with what to run::

    CommandError: the database "selfplay" is not migrated (31 migrations to apply, the first
    accounts.0001_roles); run `python manage.py migrate` first

It does not migrate by itself: changing a schema is a step a person takes (``make demo`` does it).
"""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, OperationalError, connections


def unapplied_migrations(database: str = DEFAULT_DB_ALIAS) -> list[str]:
    """``app.migration`` names not applied yet to ``database``, in the order migrate applies them."""
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connections[database])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{migration.app_label}.{migration.name}" for migration, _backwards in plan]


def require_schema(database: str = DEFAULT_DB_ALIAS) -> None:
    """CommandError saying what to do when the database cannot be reached or is not migrated."""
    name = connections[database].settings_dict.get("NAME")
    try:
        pending = unapplied_migrations(database)
    except OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CommandError(f"cannot reach the database {name!r} ({first}); start it with "
                           "`python manage.py services start` or check DATABASE_URL") from None
    if pending:
        raise CommandError(f"the database {name!r} is not migrated ({len(pending)} migration(s) to apply, the first "
                           f"{pending[0]}); run `python manage.py migrate` first")


class SchemaCommand(BaseCommand):
    """A management command that needs the schema: it stops with advice instead of a traceback."""

    def execute(self, *args, **options):
        require_schema(options.get("database") or DEFAULT_DB_ALIAS)
        return super().execute(*args, **options)
