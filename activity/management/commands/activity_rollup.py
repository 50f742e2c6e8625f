"""``manage.py activity_rollup --from --to``: recompute the daily rollup rows of a range of days."""

from __future__ import annotations

import argparse
from datetime import date
from typing import Any

from django.core.management.base import CommandError, CommandParser

from activity.errors import DayOutOfRange
from activity.management.base import JobCommand, counted
from activity.services import audience


def iso_day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date as YYYY-MM-DD") from None


class Command(JobCommand):
    help = (
        "Recompute the DailyRollup rows of the days (in the calendar's zone) from --from to --to (included), "
        "from the figures Redis still holds (the last 35 days). Each day is written whole; rerunning a day is harmless."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--from", dest="first", type=iso_day, required=True, help="First day, YYYY-MM-DD.")
        parser.add_argument("--to", dest="last", type=iso_day, required=True, help="Last day, YYYY-MM-DD.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            days = audience.rollup_days(options["first"], options["last"])
        except DayOutOfRange as error:
            raise CommandError(f"nothing rolled up: {error}.") from None
        skipped: list[str] = []
        with self.progress(len(days), "days") as progress:
            try:
                for day in days:
                    if audience.rollup_day(day) is None:
                        skipped.append(day.isoformat())
                    progress.advance()
            except KeyboardInterrupt:
                raise self.interrupted(f"{progress.done} of {len(days)} days rolled up") from None
        note = f"; skipped, another run holding their lock: {', '.join(skipped)}" if skipped else ""
        self.stdout.write(
            f"activity_rollup: {counted(len(days) - len(skipped), 'day')} rolled up, {days[0]} to {days[-1]}{note}."
        )
