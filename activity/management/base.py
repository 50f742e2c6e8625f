"""What the app's long-job commands share: a progress bar with an ETA (tqdm) when stdout is a
terminal and ``--no-progress`` is not given, a summary line at the end, Ctrl-C answered with what
was done and exit status 130 rather than a traceback, and Redis being down with a one-line error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.dispatch import Signal
from tqdm import tqdm

from activity.errors import StoreUnavailable

INTERRUPTED = 130  # a shell's exit status for a process ended by SIGINT


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """``1 row``, ``2 rows``: the summary lines' counts."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


class Progress:
    """Units of work done so far, drawn as a bar with an ETA when the command shows one."""

    def __init__(self, bar: tqdm) -> None:
        self.bar = bar
        self.done = 0

    def advance(self, amount: int = 1) -> None:
        self.done += amount
        self.bar.update(amount)

    @contextmanager
    def following(self, signal: Signal, amount: str | None = None) -> Iterator[None]:
        """Advance on each ``signal`` sent while the block runs: by its ``amount`` argument, else by one."""
        uid = f"activity.management.progress.{id(self)}"
        signal.connect(
            lambda sender, **kwargs: self.advance(kwargs[amount] if amount else 1), weak=False, dispatch_uid=uid
        )
        try:
            yield
        finally:
            signal.disconnect(dispatch_uid=uid)


class JobCommand(BaseCommand):
    """A management command running one of the app's long jobs."""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--no-progress",
            action="store_true",
            help="Draw no progress bar (none is drawn either when stdout is not a terminal).",
        )

    def execute(self, *args: Any, **options: Any) -> str | None:
        self.no_progress = options.get("no_progress", False)
        try:
            return super().execute(*args, **options)
        except StoreUnavailable as error:
            raise CommandError(f"Redis cannot serve ({error}); nothing more was done.") from error

    @contextmanager
    def progress(self, total: int | None, unit: str) -> Iterator[Progress]:
        """A bar on stdout (the raw stream: tqdm redraws its line in place) when it is a terminal."""
        shown = not self.no_progress and self.stdout.isatty()
        bar = tqdm(total=total, unit=unit, file=self.stdout._out, disable=not shown, dynamic_ncols=True)
        try:
            yield Progress(bar)
        finally:
            bar.close()

    def interrupted(self, done: str) -> CommandError:
        """The error to raise on Ctrl-C: what was done, and that a rerun finishes the job."""
        return CommandError(
            f"interrupted: {done}. Nothing is lost; run the command again to finish.", returncode=INTERRUPTED
        )
