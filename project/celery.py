"""The Celery app. Redis is the broker; the beat schedule lives in tasks.schedule."""

import os

from celery import Celery

from tasks.schedule import TASK_MODULES, beat_schedule

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("activity_service")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.imports = ["tasks.ingest", *TASK_MODULES]


@app.on_after_configure.connect
def _install_schedule(sender: Celery, **kwargs: object) -> None:
    # Built once the configuration is read, so the intervals come from the settings in force.
    sender.conf.beat_schedule = beat_schedule()
