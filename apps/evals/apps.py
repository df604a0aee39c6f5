from django.apps import AppConfig


class EvalsConfig(AppConfig):
    name = "apps.evals"
    label = "evals"

    def ready(self):
        """Every N-th checkpoint of a run whose config asks for it gets an automatic evaluation (a
        run hook, apps/runs/hooks.py), an imported run folder's evaluations become this app's rows
        (another), its checkpoint scores are the watchdog's held-out series (another), the home page's
        "runs that learned" block comes from here (apps/accounts/dashboard.py), and evaluations and
        cross-play matrices are job kinds of the shared reaper (apps/jobs/reaper.py)."""
        from apps.accounts.dashboard import contribute
        from apps.evals.heldout import heldout_from_evals
        from apps.evals.imported import import_evaluations
        from apps.evals.launch import on_checkpoint
        from apps.evals.learned import runs_that_learned
        from apps.evals.models import CrossPlay, EvalJob
        from apps.jobs.reaper import register
        from apps.runs import hooks

        hooks.on_checkpoint(on_checkpoint)
        hooks.on_import(import_evaluations)
        hooks.on_heldout(heldout_from_evals)
        contribute("learned", runs_that_learned)
        register("evals", "evaluation(s)", EvalJob.reap_stale, EvalJob.any_active)
        register("crossplays", "cross-play matrix(s)", CrossPlay.reap_stale, CrossPlay.any_active)
