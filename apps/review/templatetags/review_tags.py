"""``{% review_panel run %}``: the review panel of the run page (apps/review/panel.py)."""
from django import template

from apps.review.panel import panel_context

register = template.Library()


@register.inclusion_tag("review/_run_panel_body.html", takes_context=True)
def review_panel(context, run):
    return {**panel_context(context["request"], run), "csrf_token": context.get("csrf_token")}
