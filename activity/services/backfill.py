"""Seeding last seen from ``last_login`` for users already in the database (``manage.py
activity_backfill``): keyset-paged batches, so the last costs what the first does, each written
through "ZADD unless smaller", so a user seen since keeps the newer value and a run can stop
anywhere and run again. The same batches seed each user's first active day for the retention
cohorts (docs/cohorts.md): the earlier of ``last_login`` and the ``UserActivity`` row's
``first_seen``; then a pass over the ``UserActivity`` rows reaches the users who never logged in
(API-token callers). A first day only ever moves back, so reruns change nothing."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.dispatch import Signal

from activity import clock, conf
from activity.errors import InvalidValue
from activity.events import clean_user
from activity.models import UserActivity
from activity.services import cohorts, last_seen

# Sent after each batch is written, with ``batch`` (its number in the run, from 1) and ``size``
# (users read): the management command's progress, and the tests' hook to interrupt a run.
batch_seeded = Signal()


@dataclass(frozen=True, slots=True)
class BackfillResult:
    users: int  # users with a last_login read
    moved: int  # whose last seen moved forward (new in Redis, or older there)
    skipped: int  # an id the service cannot record, or a last_login further ahead than the skew allows
    batches: int
    first_days: int = 0  # users whose first active day was new or moved back

    @property
    def kept(self) -> int:
        """Users whose last seen in Redis was already as new or newer: left as it was."""
        return self.users - self.moved - self.skipped


def users_to_seed() -> QuerySet:
    """The users a backfill reads: those who have logged in."""
    return get_user_model()._default_manager.filter(last_login__isnull=False)


def backfill(batch_size: int = 1000) -> BackfillResult:
    """Seed every user's last seen from ``last_login``, ``batch_size`` users per query and write."""
    users = moved = skipped = batches = seeded = 0
    after = None
    while True:
        rows = users_to_seed() if after is None else users_to_seed().filter(pk__gt=after)
        page = list(rows.order_by("pk").values_list("pk", "last_login")[:batch_size])
        if not page:
            seeded += seed_first_days_from_rows(batch_size)
            return BackfillResult(users=users, moved=moved, skipped=skipped, batches=batches, first_days=seeded)
        horizon = clock.now() + conf.settings.MAX_FUTURE_SKEW
        latest: dict[str, float] = {}
        for pk, last_login in page:
            ts = round(last_login.timestamp(), 3)
            try:
                user = clean_user(str(pk))  # as the middleware records a signed-in user
            except InvalidValue:
                user = None
            if user is None or ts > horizon:
                skipped += 1
            else:
                latest[user] = ts
        moved += last_seen.seed(latest)
        known = UserActivity.objects.filter(user_id__in=list(latest)).values_list("user_id", "first_seen")
        seen = [(user, first.timestamp()) for user, first in known]
        seeded += cohorts.seed_first_days([*latest.items(), *seen])
        users += len(page)
        batches += 1
        after = page[-1][0]
        batch_seeded.send(sender=backfill, batch=batches, size=len(page))


def seed_first_days_from_rows(batch_size: int = 1000) -> int:
    """Seed first active days from every ``UserActivity`` row's ``first_seen``, keyset-paged;
    returns how many were new or moved back."""
    firsts, after = 0, None
    while True:
        rows = UserActivity.objects.all() if after is None else UserActivity.objects.filter(user_id__gt=after)
        page = list(rows.order_by("user_id").values_list("user_id", "first_seen")[:batch_size])
        if not page:
            return firsts
        firsts += cohorts.seed_first_days((user, first.timestamp()) for user, first in page)
        after = page[-1][0]
