"""The streaming export of a run's samples: tasks, rubrics, attempts, grades, preference pairs and
review verdicts as JSONL or Parquet, through ``GET /api/v1/runs/<id>/export/<kind>.<format>``
(api_urls.py, views.py), ``manage.py export`` and the run page's download buttons
(templatetags/export_tags.py).

- stream.py: what a kind selects (filters, columns, the resume cursor) and the streams of both formats;
- fetch.py: the page reader on its own connection, one page ahead, stopped when the client leaves;
- rows.py: stored values to JSONL text and Arrow columns; sql.py: the same rows built by Postgres
  (the reference the Python encoders are tested against, and the path for odd stored values).

Arrow's C++ allocator is chosen once per process, when pyarrow is imported, from the variable
below: the export (the only pyarrow user of the web server) asks for the C heap, trimmed after every
Parquet row group, rather than mimalloc, which keeps tens of MB of freed pages resident in a
long-lived server. A value set by the user is kept.
"""
import os

os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
