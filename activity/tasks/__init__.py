"""The app's Celery tasks, thin over its services, and the beat schedule that runs them.

Nothing is imported here: ``activity.tasks.schedule`` is read by a site's Celery module before
Django is set up, and the task modules register when it is (``ActivityConfig.ready``).
"""
