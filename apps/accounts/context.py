from apps.accounts.roles import can


def roles(request):
    user = getattr(request, "user", None)
    return {
        "can_upload": can(user, "upload_corpus"),
        "can_launch": can(user, "launch_run"),
        "can_review": can(user, "review_items"),
        "is_admin": can(user, "manage_users"),
    }
