"""Run in a subprocess by ``tests/test_uuid_users.py``: migrate a fresh database, sign a user with a
UUID primary key in, request a page through the tracking middleware, flush to the database, delete
the user (which erases their activity), and print what the tests check (JSON, the last line on
stdout; a failed flush is reported, not raised, so the tracking is checked either way)."""

import json
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.uuid_site.settings")
django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402

from activity.models import UserActivity  # noqa: E402
from activity.services import flush, privacy, tracking  # noqa: E402

call_command("migrate", verbosity=0)
user = get_user_model().objects.create_user("uuid-user")
browser = Client(headers={"User-Agent": "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"})
browser.force_login(user)
status = browser.get("/pricing").status_code
tracking.batches.flush()  # what the request handed to the batches, in Redis before the flush reads it
try:
    flush.flush()
    flushed_as, flush_error = UserActivity.objects.filter(account=user).values_list("user_id", flat=True).first(), ""
except Exception as error:  # reported to the test, which says what failed
    flushed_as, flush_error = None, repr(error)
pk = str(user.pk)
before = privacy.export(pk)
user.delete()  # post_delete: erased at once (no transaction open, so on_commit runs now)
left = privacy.export(pk)
print(
    json.dumps(
        {
            "pk": pk,
            "status": status,
            "flushed_as": flushed_as,
            "flush_error": flush_error,
            "before": before,
            "left": left,
        }
    )
)
