"""Users whose primary key is a UUID are tracked under ``str(pk)``, and the flush links the row to
the account. AUTH_USER_MODEL cannot change inside this test run, so a small site with a UUID-keyed
user model (``tests/uuid_site``) runs once in a subprocess on its own SQLite file, the run's Redis
and a key prefix of its own under the run's (so the run's clean-up removes its keys)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.test import override_settings

from activity import conf
from activity.store.client import get_client
from activity.store.last_seen import partition_of

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def uuid_site(tmp_path_factory) -> dict:
    """What the subprocess printed, plus the last seen Redis holds for its user (read at once:
    every test's set-up deletes the run's keys)."""
    prefix = f"{conf.settings.KEY_PREFIX}uuid:"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.uuid_site.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path_factory.mktemp('uuid_site') / 'db.sqlite3'}",
        "ACTIVITY_KEY_PREFIX": prefix,
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.uuid_site.visit"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    with override_settings(ACTIVITY_KEY_PREFIX=prefix):
        result["tombstone"] = get_client().zscore(partition_of(result["pk"]).tombstones, result["pk"])
    return result


def test_a_user_with_a_uuid_primary_key_is_tracked_under_str_pk(uuid_site):
    pk = uuid_site["pk"]
    assert str(uuid.UUID(pk)) == pk and uuid_site["status"] == 200
    assert uuid_site["flushed_as"] == pk  # tracked, so flushed


def test_the_flush_links_the_row_to_the_uuid_account(uuid_site):
    assert uuid_site["flush_error"] == ""
    assert uuid_site["flushed_as"] == uuid_site["pk"]


def test_deleting_a_uuid_user_erases_them_everywhere(uuid_site):
    before = uuid_site["before"]
    assert before["session"] and before["page_views"] and before["database"]["account"] == uuid_site["pk"]
    assert before["active_days"] and before["dense_id"] >= 1  # a UUID has a dense id: counted exactly
    assert uuid_site["left"] is None  # the export finds nothing: no last seen, session, counters or row
    assert uuid_site["tombstone"] is not None
