"""JSONL lines of an export built by Postgres, so that the server's Python does no per-field work.

``lines_sql(columns, inner_sql)`` wraps a page query (whose select list is ``c0, c1, ...`` in
column order) in ``SELECT c0, '{"id":' || ... || '}' FROM (page) q``. Each type code has a
formatter giving the same JSON as the Parquet path's values, with the types fixed per column:

- ``float``: always a float literal (``1.0``, never ``1``), ``null`` for NULL / NaN / infinities,
  because a reader that infers types per chunk (``datasets``) fails on int-then-float columns;
- ``str``: a JSON string, ``""`` for NULL; ``int`` / ``bool``: literals or ``null``;
- ``iteration``: the integer text of ``data.iteration`` or ``null`` (a JSON number: no leading zeros);
- ``turns`` / ``passages``: lists of objects with exactly the documented keys (strings, and a float
  ``score``), whatever shape the stored JSON has;
- ``ints``: ``array_to_json`` of an integer array (``[]`` for NULL);
- ``json``: a stored JSON value as it is (jsonb's own text), ``{}`` for NULL: an object, not a
  string holding one, so ``datasets`` reads its keys as columns.
"""
from __future__ import annotations

import json


def _float(x: str) -> str:
    return (f"(CASE WHEN {x} IS NULL OR {x} = 'NaN'::float8 OR {x} IN ('Infinity'::float8, '-Infinity'::float8) "
            f"THEN 'null' WHEN {x} = trunc({x}) AND abs({x}) < 1e15 THEN trunc({x})::bigint::text || '.0' "
            f"ELSE ({x})::text END)")


def _str(x: str) -> str:
    return f"to_json(coalesce(({x})::text, ''))::text"


def _objects(x: str, fields: list[tuple[str, str]]) -> str:
    """A JSON array text of objects made from the JSON objects of the jsonb array ``x``."""
    parts = " || ',' || ".join(f"'{json.dumps(name)}:' || {fmt}" for name, fmt in fields)
    return (f"(SELECT '[' || coalesce(string_agg('{{' || {parts} || '}}', ',' ORDER BY t.n), '') || ']' "
            f"FROM jsonb_array_elements(CASE WHEN jsonb_typeof({x}) = 'array' THEN {x} ELSE '[]'::jsonb END) "
            f"WITH ORDINALITY AS t(v, n) WHERE jsonb_typeof(t.v) = 'object')")


def _field(key: str) -> str:
    return _str(f"t.v->>'{key}'")


def _score() -> str:
    number = _float("(t.v->>'score')::float8")
    return f"(CASE WHEN jsonb_typeof(t.v->'score') = 'number' THEN {number} ELSE 'null' END)"


FORMATTERS = {
    "int": lambda x: f"coalesce(({x})::text, 'null')",
    "bool": lambda x: f"coalesce(({x})::text, 'null')",
    "float": _float,
    "str": _str,
    "iteration": lambda x: f"(CASE WHEN {x} ~ '^-?(0|[1-9][0-9]{{0,17}})$' THEN {x} ELSE 'null' END)",
    "ints": lambda x: f"coalesce(array_to_json({x})::text, '[]')",
    "json": lambda x: f"coalesce(({x})::text, '{{}}')",
    "turns": lambda x: _objects(x, [("role", _field("role")), ("text", _field("text"))]),
    "passages": lambda x: _objects(x, [("document_id", _field("document_id")), ("chunk_id", _field("chunk_id")),
                                       ("title", _field("title")), ("text", _field("text")), ("score", _score())]),
}


def line_expression(columns: list[tuple[str, str]]) -> str:
    """The SQL text expression of one JSONL object over ``q.c0 .. q.cN``."""
    parts = []
    for i, (name, code) in enumerate(columns):
        prefix = "{" if i == 0 else ","
        parts.append(f"'{prefix}{json.dumps(name)}:' || {FORMATTERS[code](f'q.c{i}')}")
    return " || ".join(parts) + " || '}'"


def lines_sql(columns: list[tuple[str, str]], inner_sql: str) -> str:
    """(cursor, JSONL line) of every row of the page query ``inner_sql`` (its first column is the cursor)."""
    return f"SELECT q.c0, {line_expression(columns)} FROM ({inner_sql}) q ORDER BY q.c0"
