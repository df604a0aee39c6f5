"""``{% evals_panel run %}``: the evals panel of the run page (apps/evals/views.panel_context);
``{% evals_chart run %}``: its checkpoints' scores against step next to the cross-play heatmap
(apps/evals/views.evals_chart_context); ``{% wallclock_chart runs %}``: the runs compare view's
scores against training wall-clock (apps/evals/views.wallclock_chart_context); ``{% control_gains runs %}``: the
gain of each run with a control over its base model and over its control, paired (apps/evals/compare.py).
Filters: ``pct`` (a score in percent) and ``points`` (a paired difference in signed percentage points,
templates/evals/_paired.html)."""
from django import template

from apps.evals import compare
from apps.evals.views import evals_chart_context, panel_context, wallclock_chart_context

register = template.Library()


@register.inclusion_tag("evals/_run_panel_body.html", takes_context=True)
def evals_panel(context, run):
    return {**panel_context(context["request"], run), "csrf_token": context.get("csrf_token")}


@register.inclusion_tag("evals/_run_evals_chart.html")
def evals_chart(run):
    return evals_chart_context(run)


@register.inclusion_tag("evals/_wallclock_chart.html")
def wallclock_chart(runs):
    return wallclock_chart_context(list(runs))


@register.inclusion_tag("evals/_control_gains.html")
def control_gains(runs):
    """The runs compare view's gains over the base model and over the control, for every compared run that has a
    control (or is one), each pair once."""
    pairs = []
    for run in runs:
        pairs += [p for p in compare.control_pairs(run) if (p[0].pk, p[1].pk) not in {(a.pk, b.pk) for a, b in pairs}]
    return {"gains": compare.control_gains(pairs), "gains_id": "compare-control-gains", "card": True}


@register.filter
def pct(value):
    """0.4123 -> "41.2"; None -> "—"."""
    return "—" if value is None else f"{100 * value:.1f}"


@register.filter
def points(value):
    """A difference of fractions in signed percentage points: 0.06 -> "+6.0", -0.0201 -> "-2.0", 0 -> "+0.0"."""
    if value is None:
        return "—"
    x = round(100 * value, 1)
    return f"{x + 0.0:+.1f}"  # + 0.0: no "-0.0"


@register.simple_tag
def run_headlines(runs):
    """``{% run_headlines runs as headlines %}``: run id -> its headline result (apps/evals/learned.py ``headlines``
    with ``latest``: its latest evaluated checkpoint's paired gain over its base model, and over its control), for
    the runs table, in a fixed number of queries."""
    from apps.evals.learned import headlines
    return headlines(list(runs), latest=True)


@register.filter
def headline_of(headlines, run_id):
    """``headlines|headline_of:run.pk``: that run's row of ``run_headlines``, or None."""
    return (headlines or {}).get(run_id)


@register.inclusion_tag("evals/_headline_line.html")
def run_headline(run):
    """The run page's one-line result under its title: ``headlines`` of this run, as the runs table shows it."""
    from apps.evals.learned import headlines
    return {"h": headlines([run], latest=True).get(run.pk), "run": run, "long": True}
