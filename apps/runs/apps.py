from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "apps.runs"
    label = "runs"

    def ready(self):
        """Runs are a job kind of the shared reaper (apps/jobs/reaper.py): a run whose worker went
        silent is failed, resumable."""
        from apps.jobs.reaper import register
        from apps.runs.services.lifecycle import active_runs_exist, reap_stale_runs

        register("runs", "run(s)", reap_stale_runs, active_runs_exist)
