"""The HTTP side: the tracking middleware, the REST API and ``/healthz``."""
