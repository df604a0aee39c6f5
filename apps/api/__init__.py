"""The REST API (``/api/v1/``) and the streaming export.

Arrow's C++ allocator is chosen once per process, when pyarrow is imported, from the variable
below: the export (apps/api/export.py, the only pyarrow user of the web server) asks for the C heap,
trimmed after every Parquet row group, rather than mimalloc, which keeps tens of MB of freed pages
resident in a long-lived server. A value set by the user is kept.
"""
import os

os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
