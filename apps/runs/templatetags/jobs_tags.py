"""``{{ row.job_id|waits_for:row.queue }}``: what a queued run, evaluation or ingestion waits for
(apps/jobs/waiting.py)."""
from django import template

from apps.jobs.waiting import wait_reason

register = template.Library()


@register.filter
def waits_for(job_id: str, queue: str = "") -> str:
    return wait_reason(job_id, queue or None)
