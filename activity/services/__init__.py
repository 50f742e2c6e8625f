"""What entry points call (API views, the middleware, Celery tasks, the admin, other teams' jobs):
one module per capability, over the Redis store (``activity.store``) and the database."""
