"""``{% evals_panel run %}``: the evals panel of the run page (apps/evals/views.panel_context)."""
from django import template

from apps.evals.views import panel_context

register = template.Library()


@register.inclusion_tag("evals/_run_panel_body.html", takes_context=True)
def evals_panel(context, run):
    return {**panel_context(context["request"], run), "csrf_token": context.get("csrf_token")}


@register.filter
def pct(value):
    """0.4123 -> "41.2"; None -> "—"."""
    return "—" if value is None else f"{100 * value:.1f}"
