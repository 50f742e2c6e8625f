"""``manage.py activity_erase <user> [<user> ...]``: erase users' activity everywhere. Every id is
checked first, so a malformed or unknown one stops the command, named, before anything is erased."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from activity.errors import InvalidValue, StoreUnavailable
from activity.events import clean_user
from activity.services import privacy


class Command(BaseCommand):
    help = "Erase users' activity everywhere (Redis and database); see docs/privacy.md."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("users", nargs="+", metavar="user", help="user ids (a Django user's pk)")

    def handle(self, *args: Any, users: list[str], **options: Any) -> None:
        bad = []
        for user in users:
            try:
                clean_user(user)
            except InvalidValue as error:
                bad.append(f"{user!r}: {error}")
        if bad:
            raise CommandError("invalid user ids, nothing erased: " + "; ".join(bad))
        try:
            unknown = [user for user in users if not privacy.is_known(user)]
            if unknown:
                raise CommandError("unknown users, nothing erased: " + ", ".join(unknown))
            for user in dict.fromkeys(users):
                erased = privacy.erase(user)
                self.stdout.write(
                    f"{user}: erased ({erased.traces} traces in Redis, {erased.rows} database rows, "
                    f"{erased.groups} group views dropped)"
                )
        except StoreUnavailable as error:
            raise CommandError(f"Redis is unavailable ({error}); erased so far are listed above, rerun") from None
