"""A small site whose users have UUID primary keys (``AUTH_USER_MODEL`` cannot change inside the main
test run, so ``tests/test_uuid_users.py`` runs this one in a subprocess). Everything else, Redis,
key prefix and database included, comes from the environment as in ``project.settings``."""

from project.settings import *  # noqa: F403
from project.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.uuid_site.accounts"]
AUTH_USER_MODEL = "uuid_accounts.User"
ROOT_URLCONF = "tests.pages"
