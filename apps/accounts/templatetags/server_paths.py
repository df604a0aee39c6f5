"""Server paths on pages as the viewer may see them, through the helpers the API uses (apps/accounts/roles.py):
whole for an admin, else only the folder's name (``step-000005``) or the catalog name.

``{% load server_paths %}`` then ``{{ run.checkpoint_path|server_path:request.user }}``,
``{{ job.model_spec|shown_model:request.user }}`` and ``{{ event.message|shown_text:request.user }}``.
"""
from django import template

from apps.accounts import roles

register = template.Library()


@register.filter
def server_path(path, user):
    return roles.server_path(path, user)


@register.filter
def shown_model(spec, user):
    return roles.shown_model(spec, user)


@register.filter
def shown_text(text, user):
    return roles.shown_text(text, user)
