from django.apps import AppConfig


class ActivityConfig(AppConfig):
    name = "activity"
    verbose_name = "Activity"
    default_auto_field = "django.db.models.BigAutoField"
