from importlib import import_module

from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class ActivityConfig(AppConfig):
    name = "activity"
    verbose_name = "Activity"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_delete

        from activity import checks, conf, group_membership, privacy, traffic
        from activity.tasks.schedule import TASK_MODULES

        group_membership.connect()
        checks.register()
        # A deleted user is erased everywhere once the deletion commits.
        post_delete.connect(privacy.user_deleted, sender=get_user_model(), dispatch_uid="activity.privacy.user_deleted")
        traffic.bot_patterns(conf.settings.BOT_PATTERNS)  # an invalid pattern stops start-up, named
        # Registered with Celery wherever Django runs (a worker included), whatever the site's wiring.
        for module in TASK_MODULES:
            import_module(module)


class ActivityAdminConfig(admin_apps.AdminConfig):
    """Use in INSTALLED_APPS instead of ``django.contrib.admin``: the admin site gets the dashboard."""

    default = False
    default_site = "activity.admin_site.ActivityAdminSite"
