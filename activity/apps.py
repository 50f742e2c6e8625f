from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class ActivityConfig(AppConfig):
    name = "activity"
    verbose_name = "Activity"

    def ready(self) -> None:
        from activity import group_membership

        group_membership.connect()


class ActivityAdminConfig(admin_apps.AdminConfig):
    """Use in INSTALLED_APPS instead of ``django.contrib.admin``: the admin site gets the dashboard."""

    default = False
    default_site = "activity.admin_site.ActivityAdminSite"
