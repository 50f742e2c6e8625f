"""The app's configuration: what runs once Django is set up."""

from importlib import import_module

from django.apps import AppConfig


class ActivityConfig(AppConfig):
    name = "activity"
    verbose_name = "Activity"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_delete, post_save

        from activity import checks, conf
        from activity.models import Funnel
        from activity.services import funnels, groups, privacy, traffic

        groups.connect_signals()
        # A process that changed the funnels counts by the new ones at once; others within REFRESH_S.
        for signal in (post_save, post_delete):
            signal.connect(funnels.forget, sender=Funnel, dispatch_uid=f"activity.funnels.forget.{signal is post_save}")
        checks.register()
        # A deleted user is erased everywhere once the deletion commits.
        post_delete.connect(
            privacy.erase_deleted_user,
            sender=get_user_model(),
            dispatch_uid="activity.erase_deleted_user",
        )
        traffic.bot_patterns(conf.settings.BOT_PATTERNS)  # an invalid pattern stops start-up, named
        # The tasks register with Celery wherever Django runs (a worker included), whatever the site's wiring.
        import_module("activity.tasks")
