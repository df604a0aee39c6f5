"""``{{ value|as_json }}``: a recipe's data block as indented JSON (what the export and the API write), not
Python's repr (``{'a': None}`` reads as JSON ``{"a": null}``). Escaped by the template like any text."""
import json

from django import template

register = template.Library()


@register.filter
def as_json(value) -> str:
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)
