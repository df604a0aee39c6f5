from django.db import migrations


def create_roles(apps, schema_editor):
    from apps.accounts.models import ROLE_PERMISSIONS

    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    ct, _ = ContentType.objects.get_or_create(app_label="accounts", model="access")
    names = dict(
        upload_corpus="Can upload and manage corpora",
        launch_run="Can launch and control runs",
        review_items="Can review generated tasks, rubrics and grades",
        manage_users="Can manage users and roles",
        control_any_run="Can control runs owned by others",
        allow_remote_code="Can allow trust_remote_code in run configs",
    )
    perms = {code: Permission.objects.get_or_create(content_type=ct, codename=code, defaults={"name": name})[0]
             for code, name in names.items()}
    for role, codes in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.add(*[perms[c] for c in codes])


class Migration(migrations.Migration):
    initial = True
    dependencies = [("auth", "0012_alter_user_first_name_max_length"), ("contenttypes", "0002_remove_content_type_name")]
    operations = [
        migrations.CreateModel(
            name="Access",
            fields=[("id", __import__("django.db.models", fromlist=["BigAutoField"]).BigAutoField(primary_key=True, serialize=False))],
            options={"managed": False, "default_permissions": (), "permissions": [
                ("upload_corpus", "Can upload and manage corpora"),
                ("launch_run", "Can launch and control runs"),
                ("review_items", "Can review generated tasks, rubrics and grades"),
                ("manage_users", "Can manage users and roles"),
                ("control_any_run", "Can control runs owned by others"),
                ("allow_remote_code", "Can allow trust_remote_code in run configs"),
            ]},
        ),
        migrations.RunPython(create_roles, migrations.RunPython.noop),
    ]
