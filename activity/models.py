"""What reaches the database: one activity row per user, written in bulk by the flush job."""

from django.conf import settings
from django.db import models

from activity.managers import UserActivityManager
from activity.permissions import DECLARED


class UserActivity(models.Model):
    """A user's last seen as of the latest flush. Redis stays the live source of truth."""

    user_id = models.CharField("user id", max_length=64, primary_key=True)
    account = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
        db_index=False,
        related_name="+",
        verbose_name="Django user",
        help_text="The Django user whose pk is this id, when there is one.",
    )
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField(db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = UserActivityManager()

    class Meta:
        verbose_name = "user activity"
        verbose_name_plural = "user activity"
        ordering = ["-last_seen"]
        # Each flushed row writes every index, so there are only the ones queries use: the user id,
        # last seen, and the Django user where there is one. Migration 0003 drops the LIKE-pattern
        # index PostgreSQL gives a CharField key; no query uses it.
        indexes = [
            models.Index(fields=["account"], condition=models.Q(account__isnull=False), name="activity_account_idx")
        ]
        permissions = DECLARED  # the app's, for the API and the admin alike (activity.permissions)

    def __str__(self) -> str:
        return self.user_id


class Dashboard(UserActivity):
    """No data of its own: it gives the dashboard (``activity.admin.dashboard``) its place in the
    admin index; its permissions are ``UserActivity``'s ``view_activity`` and ``run_jobs``."""

    class Meta:
        proxy = True
        verbose_name = "activity dashboard"
        verbose_name_plural = "activity dashboard"
        default_permissions = ()


class DailyRollup(models.Model):
    """One local day's audience figures (the calendar's zone, ``activity.calendar``), written by the
    rollup job after the day ends (idempotent)."""

    day = models.DateField(unique=True)
    active_users = models.PositiveIntegerField(default=0)
    sessions = models.PositiveIntegerField(default=0)
    page_views = models.PositiveIntegerField(default=0)
    new_visitors = models.PositiveIntegerField(default=0, help_text="Visitors whose first visit ever was this day.")
    unique_visitors = models.PositiveIntegerField(default=0, help_text="Estimated (HyperLogLog, about 1% error).")
    bot_requests = models.PositiveBigIntegerField(
        default=0, help_text="Requests counted as bots: a crawler's user agent, or none."
    )
    machine_requests = models.PositiveBigIntegerField(default=0, help_text="Requests authenticated by an API token.")
    time_zone = models.CharField(
        max_length=64, help_text="The zone whose local midnights bound this day, as of the row's last rollup."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "daily rollup"
        ordering = ["-day"]

    def __str__(self) -> str:
        return self.day.isoformat()


class RetentionCell(models.Model):
    """One cell of a site-wide retention table (docs/cohorts.md): of the cohort that started on
    ``cohort`` (first active, or signed up, in that local day or ISO week), how many were active
    ``offset`` periods later. Written by the rollup while the period's bitmaps are still in Redis, so
    a table reaching past them stays exact."""

    BY_CHOICES = [("first_seen", "first seen"), ("signup", "signed up")]
    PERIOD_CHOICES = [("day", "day"), ("week", "week")]

    by = models.CharField(max_length=16, choices=BY_CHOICES)
    period = models.CharField(max_length=8, choices=PERIOD_CHOICES)
    cohort = models.DateField(help_text="The cohort's first day (a Monday for weeks).")
    offset = models.PositiveSmallIntegerField(help_text="Periods after the cohort's own (0: the cohort's).")
    size = models.PositiveIntegerField(default=0, help_text="Users in the cohort.")
    retained = models.PositiveIntegerField(default=0, help_text="Of them, users active in that period.")
    time_zone = models.CharField(max_length=64, help_text="The zone whose local midnights cut the periods.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "retention cell"
        ordering = ["by", "period", "-cohort", "offset"]
        constraints = [
            models.UniqueConstraint(fields=["by", "period", "cohort", "offset"], name="activity_retention_cell_unique")
        ]

    def __str__(self) -> str:
        return f"{self.by} {self.period} {self.cohort.isoformat()} +{self.offset}"
