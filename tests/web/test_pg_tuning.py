"""The embedded Postgres is sized to the machine (selfplay_web/services.py: pg_tuning, selfplay.conf)."""
from selfplay_web import services

GIB = 1 << 30


def test_settings_follow_the_machine_within_bounds():
    # this dev box: 24 GiB, 2 cores -> 25% = 6 GiB capped at 4 GiB; 1/8 = 3 GiB capped at 2 GiB
    assert services.pg_tuning(24 * GIB, 2) == {
        "shared_buffers": "4096MB", "effective_cache_size": "12288MB", "maintenance_work_mem": "2048MB",
        "max_parallel_maintenance_workers": "1", "max_parallel_workers_per_gather": "1"}
    small = services.pg_tuning(2 * GIB, 16)  # 25% of 2 GiB = 512 MB; 1/8 = 256 MB; 15 cores -> 7 workers
    assert (small["shared_buffers"], small["maintenance_work_mem"], small["max_parallel_maintenance_workers"],
            small["max_parallel_workers_per_gather"]) == ("512MB", "256MB", "7", "4")
    assert services.pg_tuning(256 << 20, 1)["shared_buffers"] == "128MB"  # never below Postgres' default


def test_the_settings_file_is_included_once_and_rewritten_only_when_it_changes(tmp_path):
    (tmp_path / "postgresql.conf").write_text("shared_buffers = 128MB\n")
    services._write_tuning(tmp_path)
    services._write_tuning(tmp_path)
    conf = (tmp_path / "postgresql.conf").read_text()
    assert conf.count("include_if_exists = 'selfplay.conf'") == 1 and conf.startswith("shared_buffers = 128MB")
    written = (tmp_path / "selfplay.conf").read_text()
    assert f"shared_buffers = '{services.pg_tuning()['shared_buffers']}'" in written


def test_the_running_embedded_server_reads_the_file(db):
    """The include is in place: the server reports the file's value, or a restart pending for it."""
    import os

    from django.db import connection

    if os.environ.get("DATABASE_URL"):
        return  # a server we do not manage keeps its own settings
    with connection.cursor() as cur:
        cur.execute("SELECT setting, unit, pending_restart, sourcefile FROM pg_settings WHERE name = 'shared_buffers'")
        setting, unit, pending, source = cur.fetchone()
    assert unit == "8kB"
    wanted = int(services.pg_tuning()["shared_buffers"].removesuffix("MB")) * 128  # 8 kB pages
    assert pending or (int(setting) == wanted and source.endswith("selfplay.conf"))
