from django.apps import AppConfig


class ReviewConfig(AppConfig):
    name = "apps.review"
    label = "review"

    def ready(self):
        """Review joins each run through the run hooks: what enters the queue after a flush, and the
        verdicts and harness edits handed to the recipe at each step boundary."""
        from apps.review.feedback import pending_harness, pending_verdicts
        from apps.review.sampling import enqueue_for_review
        from apps.runs import hooks

        hooks.on_flush(enqueue_for_review)
        hooks.on_control("verdicts", pending_verdicts)
        hooks.on_control("harness", pending_harness)
        from apps.review.collapse import on_collapse

        hooks.on_watchdog(on_collapse)  # a collapsed task family goes to the front of the queue
