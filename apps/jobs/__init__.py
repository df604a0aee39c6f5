"""The shared job layer: the life of a background job row, and the reaper, for every app.

It knows none of the apps. A job row (a run, an evaluation, a cross-play matrix) has ``status``,
``queue``, ``job_id``, ``worker_name``, ``started_at``, ``heartbeat_at`` and ``error``.

- ``lifecycle.py``: ``enqueue`` (put a job on the row's RQ queue; ``QueueUnavailable`` when Redis
  refuses), ``run_job`` (claim, heartbeat, record how it ended) and the ``Heartbeat`` thread.
- ``reaper.py``: ``reap`` (fail rows whose worker went silent), the registry of job kinds that
  ``reap_all`` / ``any_active`` walk, and the periodic reaper job that reschedules itself while
  any job is active.

Each app registers its job kinds from its ``AppConfig.ready()`` (``reaper.register``).
"""
