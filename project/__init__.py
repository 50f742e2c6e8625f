"""Django project wiring: settings, URLs, WSGI/ASGI and the Celery app."""

from project.celery import app as celery_app

__all__ = ["celery_app"]
