"""The example project's own Celery jobs, built on the activity app's Python API (the app's tasks
are in ``activity.tasks``)."""
