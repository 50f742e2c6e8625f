"""The Celery app. Redis is the broker; the beat schedule is the activity app's (activity.schedule)."""

import os

from celery import Celery

from activity.schedule import install_beat_schedule

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("activity_service")
app.config_from_object("django.conf:settings", namespace="CELERY")
# The app's own tasks register when Django is set up (ActivityConfig.ready); this project's own job:
app.conf.imports = ["jobs.reengagement"]
app.on_after_configure.connect(install_beat_schedule)
