"""The Celery app. Redis is the broker; the beat schedule lives in tasks.schedule."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("activity_service")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.imports = ["tasks.ingest", "tasks.reports"]
