"""Celery tasks: thin wrappers over activity.services."""
