from django.apps import AppConfig


class EvalsConfig(AppConfig):
    name = "apps.evals"
    label = "evals"

    def ready(self):
        """Every N-th checkpoint of a run whose config asks for it gets an automatic evaluation (a
        run hook, apps/runs/hooks.py), an imported run folder's evaluations become this app's rows
        (another), and evaluations and cross-play matrices are job kinds of the shared reaper
        (apps/jobs/reaper.py)."""
        from apps.evals.imported import import_evaluations
        from apps.evals.launch import on_checkpoint
        from apps.evals.models import CrossPlay, EvalJob
        from apps.jobs.reaper import register
        from apps.runs import hooks

        hooks.on_checkpoint(on_checkpoint)
        hooks.on_import(import_evaluations)
        register("evals", "evaluation(s)", EvalJob.reap_stale, EvalJob.any_active)
        register("crossplays", "cross-play matrix(s)", CrossPlay.reap_stale, CrossPlay.any_active)
