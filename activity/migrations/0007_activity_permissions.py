"""One permission model for the API and the admin: ``view_activity``,
``export_activity`` and ``erase_activity`` join ``ingest_events`` and ``run_jobs``. The dashboard's
``view_dashboard`` becomes ``view_activity``, so every grant of it, to a user or a group, carries
over (its row is renamed; should ``view_activity`` exist already, its grants are copied over)."""

from django.conf import settings
from django.db import migrations

VIEW_NAME = "Can view everyone's activity: API reads, stats, reports, metrics, the dashboard"
DASHBOARD_NAME = "Can view the activity dashboard"


def _grant_tables(apps):
    """The through models holding permission grants: to groups, and to users when the user model has them."""
    found = [apps.get_model("auth", "Group").permissions.through]
    user_model = apps.get_model(settings.AUTH_USER_MODEL)
    if hasattr(user_model, "user_permissions"):
        found.append(user_model.user_permissions.through)
    return found


def _rename(apps, old_codename, new_codename, name):
    Permission = apps.get_model("auth", "Permission")
    rows = Permission.objects.filter(content_type__app_label="activity", content_type__model="useractivity")
    old = rows.filter(codename=old_codename).first()
    if old is None:
        return  # a new database: Django creates the permissions once migrations have run
    new = rows.filter(codename=new_codename).first()
    if new is None:
        rows.filter(pk=old.pk).update(codename=new_codename, name=name)
        return
    for through in _grant_tables(apps):
        holder = next(f.attname for f in through._meta.concrete_fields if f.is_relation and f.name != "permission")
        held = through.objects.filter(permission_id=old.pk).values_list(holder, flat=True)
        through.objects.bulk_create(
            [through(**{holder: pk, "permission_id": new.pk}) for pk in held], ignore_conflicts=True
        )
    old.delete()


def forwards(apps, schema_editor):
    _rename(apps, "view_dashboard", "view_activity", VIEW_NAME)


def backwards(apps, schema_editor):
    _rename(apps, "view_activity", "view_dashboard", DASHBOARD_NAME)


class Migration(migrations.Migration):

    dependencies = [
        ('auth', '0001_initial'),
        ('contenttypes', '0002_remove_content_type_name'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ('activity', '0006_dashboard'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='useractivity',
            options={'ordering': ['-last_seen'], 'permissions': [('view_activity', "Can view everyone's activity: API reads, stats, reports, metrics, the dashboard"), ('export_activity', "Can export any user's activity"), ('erase_activity', "Can erase any user's activity everywhere"), ('ingest_events', 'Can send activity events to the ingest API'), ('run_jobs', 'Can queue activity jobs (flush, report rebuild) from the dashboard')], 'verbose_name': 'user activity', 'verbose_name_plural': 'user activity'},
        ),
        migrations.RunPython(forwards, backwards),
    ]
