from django.apps import AppConfig


class ActivityConfig(AppConfig):
    name = "activity"
    verbose_name = "Activity"

    def ready(self) -> None:
        from activity import signals

        signals.connect()
