"""What reaches the database: one activity row per user, written in bulk by the flush job; the daily
rollup's figures; the funnels staff define and their finished counts."""

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from activity import clock
from activity.funnel_rules import MAX_STEPS, MAX_WINDOW, MIN_STEPS, MIN_WINDOW, validate_steps
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


FUNNEL_MODES = [
    ("sequential", "sequential: other pages may come between steps"),
    ("strict", "strict: each step is the very next page view"),
]
FUNNEL_PERIODS = [("day", "day"), ("week", "week"), ("month", "month")]


class Funnel(models.Model):
    """A funnel staff defined (docs/funnels.md): counted live in Redis from its creation on, its
    finished periods kept in ``FunnelCount`` rows by the daily rollup. Its steps, window and mode
    never change once created: the counts would mix two definitions."""

    name = models.CharField(max_length=100)
    steps = models.JSONField(
        validators=[validate_steps],
        help_text=f"{MIN_STEPS}-{MAX_STEPS} paths, in order; a path ending in * matches every path it begins.",
    )
    window = models.PositiveIntegerField(
        validators=[MinValueValidator(MIN_WINDOW), MaxValueValidator(MAX_WINDOW)],
        help_text=f"Seconds from entering (step 1) within which each later step counts ({MIN_WINDOW}-{MAX_WINDOW}).",
    )
    mode = models.CharField(max_length=10, choices=FUNNEL_MODES, default="sequential")
    created = models.DateTimeField(default=clock.now_datetime, editable=False)

    class Meta:
        ordering = ["id"]
        default_permissions = ()  # the app's own: view_activity to read, define_funnels to change

    def __str__(self) -> str:
        return self.name


class FunnelCount(models.Model):
    """People counted at one step of a funnel in one finished period, written by the daily rollup
    once the period's last entries could no longer move on (its end plus the window)."""

    funnel = models.ForeignKey(Funnel, on_delete=models.CASCADE, related_name="counts")
    period = models.CharField(max_length=8, choices=FUNNEL_PERIODS)
    start = models.DateField(help_text="The period's first day (a Monday for weeks, the 1st for months).")
    step = models.PositiveSmallIntegerField()
    people = models.PositiveIntegerField(default=0)
    time_zone = models.CharField(max_length=64, help_text="The zone whose local midnights cut the period.")

    class Meta:
        ordering = ["funnel", "period", "-start", "step"]
        constraints = [
            models.UniqueConstraint(fields=["funnel", "period", "start", "step"], name="activity_funnel_count_unique")
        ]

    def __str__(self) -> str:
        return f"{self.funnel_id} {self.period} {self.start.isoformat()} step {self.step}"
