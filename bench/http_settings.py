"""The service's settings with the bench's URLconf (``bench.http_urls``); nothing else differs."""

from project.settings import *  # noqa: F403

ROOT_URLCONF = "bench.http_urls"
