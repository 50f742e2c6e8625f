from importlib import import_module

from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class ActivityConfig(AppConfig):
    name = "activity"
    verbose_name = "Activity"

    def ready(self) -> None:
        from activity import checks, group_membership
        from activity.tasks.schedule import TASK_MODULES

        group_membership.connect()
        checks.register()
        # Registered with Celery wherever Django runs (a worker included), whatever the site's wiring.
        for module in TASK_MODULES:
            import_module(module)


class ActivityAdminConfig(admin_apps.AdminConfig):
    """Use in INSTALLED_APPS instead of ``django.contrib.admin``: the admin site gets the dashboard."""

    default = False
    default_site = "activity.admin_site.ActivityAdminSite"
