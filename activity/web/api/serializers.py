"""Request and response shapes. Validation rules come from activity.events."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.core.validators import RegexValidator
from django.http import QueryDict
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from activity import calendar, conf
from activity.errors import InvalidBatch, InvalidValue
from activity.events import (
    MAX_INT_USER,
    MAX_PATH_LENGTH,
    MIN_INT_USER,
    MIN_TS,
    NOT_NULL,
    REQUIRED,
    USER_ID_PATTERN,
    Event,
    clean_events,
    clean_path,
    clean_ts,
    clean_user,
)
from activity.funnel_rules import MAX_STEPS, MIN_STEPS, STEP_PATTERN, validate_steps
from activity.models import Funnel
from activity.services import funnels
from activity.services.pages_now import MAX_N as PAGES_NOW_MAX
from activity.services.recommendations import MAX_RESULTS
from activity.services.reports import REPORT_PERIODS
from activity.web.api.pagination import CURSOR_PATTERN, MAX_CURSOR_LENGTH, decode_cursor

# Page numbers and sizes are bounded so every offset (page x page_size) fits Redis, which refuses an
# LRANGE / ZRANGE offset past a 64-bit integer.
MAX_PAGE = 1_000_000
MAX_PAGE_SIZE = 500
MAX_ROW_ID = 2**63 - 1  # a database row id (a group, a funnel) in a URL or a query
INTEGER_RE = re.compile(r"0|[1-9][0-9]*")
NON_FIELD_ERRORS = "non_field_errors"  # DRF's default key, whatever the site's NON_FIELD_ERRORS_KEY


class _CleanedField(serializers.Field):
    """A field whose value is checked by one of activity.events' ``clean_*`` functions."""

    cleaner = staticmethod(lambda value: value)

    def to_internal_value(self, data: Any) -> Any:
        try:
            return self.cleaner(data)
        except InvalidValue as error:
            raise serializers.ValidationError(str(error)) from None

    def to_representation(self, value: Any) -> Any:
        return value


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "pattern": f"^{USER_ID_PATTERN}$"},
            {"type": "integer", "minimum": MIN_INT_USER, "maximum": MAX_INT_USER},
        ],
        "description": "A user id: 1-64 characters from A-Z a-z 0-9 _ . : @ -, or an integer (sent as its digits).",
    }
)
class UserIdField(_CleanedField):
    cleaner = staticmethod(clean_user)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "number", "minimum": MIN_TS},
            {"type": "string", "format": "date-time"},
        ],
        "description": "When it happened: epoch seconds, or an ISO 8601 date-time with an offset (Z, +01:00); "
        f"at least {MIN_TS} s after the epoch and at most ACTIVITY_MAX_FUTURE_SKEW (60 s) in the future; "
        "stored to the millisecond. Default: the time the server receives it.",
    }
)
class TimestampField(_CleanedField):
    cleaner = staticmethod(clean_ts)


@extend_schema_field(
    {
        "type": "string",
        "maxLength": MAX_PATH_LENGTH,
        "description": "The page viewed; the event is then also a page view of the user's session.",
    }
)
class PathField(_CleanedField):
    cleaner = staticmethod(clean_path)


class EventSerializer(serializers.Serializer):
    """One event's shape, for the OpenAPI document; ``clean_batch`` validates the batch."""

    user = UserIdField()
    ts = TimestampField(required=False)
    path = PathField(required=False)


class EventListField(serializers.ListField):
    """The batch's shape, for the OpenAPI document."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=EventSerializer(), allow_empty=False, **kwargs)


class EventBatchSerializer(serializers.Serializer):
    """The ingest request as the OpenAPI document describes it; ``clean_batch`` validates one."""

    events = EventListField()

    def get_fields(self) -> dict[str, serializers.Field]:
        """The batch limit in the document is ``ACTIVITY_MAX_BATCH`` as set now, not at import."""
        fields = super().get_fields()
        fields["events"] = EventListField(min_length=1, max_length=conf.settings.MAX_BATCH)
        return fields


def clean_batch(data: Any) -> list[Event]:
    """The body's events, refused with the errors ``EventBatchSerializer`` would give, without
    building its fields on every request."""
    if data is None:  # a JSON null body: DRF's own message for it
        raise serializers.ValidationError({NON_FIELD_ERRORS: ["No data provided"]}, code="null")
    if not isinstance(data, Mapping):
        message = serializers.Serializer.default_error_messages["invalid"].format(datatype=type(data).__name__)
        raise serializers.ValidationError({NON_FIELD_ERRORS: [message]}, code="invalid")
    if "events" not in data:
        raise serializers.ValidationError({"events": [REQUIRED]}, code="required")
    if data["events"] is None:
        raise serializers.ValidationError({"events": [NOT_NULL]}, code="null")
    try:
        return clean_events(data["events"])
    except InvalidBatch as error:
        raise serializers.ValidationError(error.errors) from None


class IngestResultSerializer(serializers.Serializer):
    accepted = serializers.IntegerField()
    last_seen_updated = serializers.IntegerField()


class LastSeenSerializer(serializers.Serializer):
    """Response shape of ``GET /api/v1/users/<user>/last-seen/`` (schema only: the view builds the
    body, as a serializer instance costs more than the rest of the request's Python)."""

    user = serializers.CharField()
    ts = serializers.FloatField()
    last_seen = serializers.CharField(help_text="ts as ISO 8601 UTC with milliseconds.")
    online = serializers.BooleanField()


class OnlineUserSerializer(serializers.Serializer):
    user = serializers.CharField()
    ts = serializers.FloatField()
    last_seen = serializers.CharField()


class OnlinePageSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    results = OnlineUserSerializer(many=True)


class QueryIntegerField(serializers.IntegerField):
    """An integer parameter in ASCII digits, without sign, spaces or leading zeros: DRF's takes
    ``" 5"``, ``"1_0"``, ``"5.0"`` or Arabic-Indic digits, and the links built from it echo them."""

    default_error_messages = {"invalid": "Must be a whole number in ASCII digits, without sign or leading zeros."}

    def to_internal_value(self, data: Any) -> int:
        if not isinstance(data, str) or not INTEGER_RE.fullmatch(data):
            self.fail("invalid")
        return super().to_internal_value(data)


class QuerySerializer(serializers.Serializer):
    """Query parameters, read strictly: one given blank or more than once is a 400 (DRF would take a
    blank one as absent and a repeated one as its last value)."""

    def to_internal_value(self, data: QueryDict) -> dict[str, Any]:
        errors = {}
        for name in self.fields:
            values = data.getlist(name)
            if len(values) > 1:
                errors[name] = ["Give this parameter at most once."]
            elif values == [""]:
                errors[name] = ["This field may not be blank."]
        if errors:
            raise serializers.ValidationError(errors)
        return super().to_internal_value(data)


class _PageSizeSerializer(QuerySerializer):
    """``page_size`` between 1 and ``MAX_PAGE_SIZE``, defaulting per list."""

    default_page_size = 50

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        fields["page_size"] = QueryIntegerField(
            min_value=1,
            max_value=MAX_PAGE_SIZE,
            required=False,
            default=self.default_page_size,
            help_text=f"Rows per page, at most {MAX_PAGE_SIZE}.",
        )
        return fields


class OnlineQuerySerializer(_PageSizeSerializer):
    within = QueryIntegerField(
        min_value=1, max_value=86400, required=False, help_text="Seconds; default the online window."
    )
    cursor = serializers.CharField(
        required=False,
        trim_whitespace=False,  # " 1_2" is no cursor: as the document's pattern says
        max_length=MAX_CURSOR_LENGTH,
        validators=[RegexValidator(f"^{CURSOR_PATTERN}$")],
        help_text="Copy it from the previous page's `next` link: the last row's position, `<ts>_<user>`.",
    )

    def validate_cursor(self, value: str) -> tuple[float, str]:
        try:
            return decode_cursor(value)
        except InvalidValue as error:
            raise serializers.ValidationError(str(error)) from None


class PeriodCountsSerializer(serializers.Serializer):
    day = serializers.IntegerField()
    week = serializers.IntegerField()
    month = serializers.IntegerField()


class DayCountSerializer(serializers.Serializer):
    day = serializers.IntegerField()


class StatsSerializer(serializers.Serializer):
    """Response shape of ``GET /api/v1/stats/`` (schema only: the service builds the body)."""

    online = serializers.IntegerField(help_text="Users seen within the online window.")
    active = PeriodCountsSerializer(
        help_text="Active users today / this ISO week / this month (in ACTIVITY_TIME_ZONE), exact."
    )
    new_visitors = DayCountSerializer(help_text="Visitors whose first visit ever was today.")
    unique_visitors = PeriodCountsSerializer(
        help_text="Distinct visitors: anonymous ones (HyperLogLog estimate) plus the active users."
    )
    bots = DayCountSerializer(help_text="Requests today from crawlers or without a user agent (not visitors).")
    machines = DayCountSerializer(help_text="Requests today authenticated by an API token (not active users).")
    day = serializers.DateField(help_text="The day the figures are for, in ACTIVITY_TIME_ZONE.")


class PagesNowQuerySerializer(QuerySerializer):
    """``?n=`` of ``GET /api/v1/pages/now/``."""

    n = QueryIntegerField(
        min_value=1,
        max_value=PAGES_NOW_MAX,
        required=False,
        default=10,
        help_text=f"How many pages, 1-{PAGES_NOW_MAX}.",
    )


class PageNowSerializer(serializers.Serializer):
    path = serializers.CharField()
    people = serializers.IntegerField(help_text="People online whose latest page view is this page.")


class PagesNowSerializer(serializers.Serializer):
    window = serializers.IntegerField(help_text="The online window, seconds (ACTIVITY_ONLINE_WINDOW).")
    results = PageNowSerializer(many=True, help_text="Most people first, ties by path.")


class LiveStatsSerializer(StatsSerializer):
    """The data of each ``stats`` event of ``GET /api/v1/live/``."""

    page_views = DayCountSerializer(help_text="Page views today (in ACTIVITY_TIME_ZONE).")
    pages_now = PageNowSerializer(many=True, help_text="The first 10 of GET /api/v1/pages/now/.")


class PageQuerySerializer(_PageSizeSerializer):
    """``?page=&page_size=`` of page-numbered lists (DRF's PageNumberPagination parameters), bounded
    so the offset always fits Redis."""

    page = QueryIntegerField(min_value=1, max_value=MAX_PAGE, required=False, default=1, help_text="1-based.")


class SessionQuerySerializer(PageQuerySerializer):
    default_page_size = 20


class ReportQuerySerializer(PageQuerySerializer):
    period = serializers.ChoiceField(
        choices=REPORT_PERIODS,
        required=False,
        default="day",
        help_text="The day (default) or ISO week, in ACTIVITY_TIME_ZONE.",
    )


def row_id(name: str, value: str) -> int:
    """A URL argument ``name`` naming a database row (a group, a funnel), spelled like any integer
    parameter, from 1 to MAX_ROW_ID; else ``ValidationError`` naming ``name``."""
    try:
        return QueryIntegerField(min_value=1, max_value=MAX_ROW_ID).run_validation(value)
    except serializers.ValidationError as error:
        raise serializers.ValidationError({name: error.detail}) from None


class ReportInfoSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()


class ReportListSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    results = ReportInfoSerializer(many=True)


class NumberedPageSerializer(serializers.Serializer):
    """The envelope of page-numbered lists: ``count`` plus links to the next and previous pages."""

    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)


class ReportRowSerializer(serializers.Serializer):
    rank = serializers.IntegerField()
    user = serializers.CharField()
    name = serializers.CharField()
    views = serializers.IntegerField()


class ReportPageSerializer(NumberedPageSerializer):
    report = serializers.CharField()
    period = serializers.CharField()
    generated_at = serializers.CharField()
    expires_in = serializers.FloatField()
    results = ReportRowSerializer(many=True)


class PageViewSerializer(serializers.Serializer):
    path = serializers.CharField()
    ts = serializers.FloatField()
    at = serializers.CharField()


class SessionPageSerializer(NumberedPageSerializer):
    user = serializers.CharField()
    expires_in = serializers.FloatField()
    results = PageViewSerializer(many=True)


class GroupActiveQuerySerializer(QuerySerializer):
    """``?period=`` of a group's active members."""

    period = serializers.ChoiceField(
        choices=calendar.PERIODS,
        required=False,
        default="day",
        help_text="Today (default), this ISO week or this month, in ACTIVITY_TIME_ZONE.",
    )


class GroupActiveSerializer(serializers.Serializer):
    """Response shape of ``GET /api/v1/groups/<id>/active/`` (schema only: the service builds the body)."""

    group = serializers.IntegerField()
    period = serializers.ChoiceField(choices=calendar.PERIODS)
    active = serializers.IntegerField(
        help_text="Members active in the current period, exact. Only members whose user id is an integer "
        "(up to 2^26) are counted, as in the active-user figures: a member with another id (a UUID) is not."
    )
    members = serializers.IntegerField(help_text="Members of the group, from the database.")
    day = serializers.DateField(help_text="The local day whose day, ISO week or month was counted.")


class GroupMemberSerializer(serializers.Serializer):
    user = serializers.CharField()
    ts = serializers.FloatField(allow_null=True)
    last_seen = serializers.CharField(allow_null=True)


class GroupMembersPageSerializer(NumberedPageSerializer):
    group = serializers.IntegerField()
    results = GroupMemberSerializer(many=True)


class _PickCountSerializer(QuerySerializer):
    n = QueryIntegerField(
        min_value=1, max_value=MAX_RESULTS, required=False, default=5, help_text=f"How many pages, 1-{MAX_RESULTS}."
    )


class RecommendationsQuerySerializer(_PickCountSerializer):
    """``?n=`` of a user's recommendations."""


@extend_schema_field(
    {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_PATH_LENGTH,
        "description": "A page as page views record it (without its query string); 400 when no page "
        "followed it in the window.",
    }
)
class QueryPathField(PathField):
    """A page path given as a query parameter: the ingest rules (blank is refused as any parameter)."""


class NextPagesQuerySerializer(_PickCountSerializer):
    path = QueryPathField()


class RecommendationSerializer(serializers.Serializer):
    path = serializers.CharField()
    score = serializers.FloatField(help_text="Share of the transitions after the user's recent pages, by recency.")


class RecommendationsSerializer(serializers.Serializer):
    user = serializers.CharField()
    results = RecommendationSerializer(many=True)


class NextPageSerializer(serializers.Serializer):
    path = serializers.CharField()


class NextPagesSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="The page as recorded.")
    results = NextPageSerializer(many=True)


class ExportLastSeenSerializer(serializers.Serializer):
    ts = serializers.FloatField()
    at = serializers.CharField()
    online = serializers.BooleanField()
    unflushed_since = serializers.FloatField(allow_null=True, help_text="First change not yet in the database.")
    claimed_at = serializers.FloatField(allow_null=True, help_text="When a running flush claimed the change.")


class ExportSessionSerializer(serializers.Serializer):
    expires_in = serializers.FloatField()
    pages = PageViewSerializer(many=True, help_text="Oldest first.")


class ExportPageViewsSerializer(serializers.Serializer):
    period = serializers.ChoiceField(choices=REPORT_PERIODS)
    name = serializers.CharField(help_text="YYYYMMDD for a day, YYYYWww for an ISO week.")
    views = serializers.IntegerField()


class ExportRowSerializer(serializers.Serializer):
    user_id = serializers.CharField()
    account = serializers.CharField(allow_null=True, help_text="The Django user's pk, when linked.")
    first_seen = serializers.DateTimeField()
    last_seen = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class ExportVisitorSerializer(serializers.Serializer):
    visitor = serializers.CharField(help_text="The visitor id (32 hex digits) of the browser's cookie.")
    linked_at = serializers.FloatField(help_text="When it signed in as the user, epoch seconds.")
    at = serializers.CharField()


class ExportSerializer(serializers.Serializer):
    """Response shape of ``GET /api/v1/users/<user>/activity/export/`` (schema only)."""

    user = serializers.CharField()
    exported_at = serializers.CharField()
    last_seen = ExportLastSeenSerializer(allow_null=True)
    session = ExportSessionSerializer(allow_null=True, help_text="The live navigation session, if any.")
    display_name = serializers.CharField(allow_null=True, help_text="The name the reports show.")
    former_names = serializers.ListField(child=serializers.CharField(), help_text="Names still in past reports.")
    page_views = ExportPageViewsSerializer(many=True, help_text="The user's page views per retained day and week.")
    groups = serializers.ListField(child=serializers.IntegerField(), help_text="Group views listing the user.")
    dense_id = serializers.IntegerField(
        allow_null=True,
        help_text="The small integer the user's bits sit at in the active-user, cohort and group bitmaps "
        "(assigned once, never reused); null when none was assigned.",
    )
    active_days = serializers.ListField(child=serializers.DateField(), help_text="Retained days the user was active.")
    first_visit = serializers.DateField(
        allow_null=True, help_text="The day of the first visit ever, in the zone of that day."
    )
    first_active = serializers.DateField(
        allow_null=True,
        help_text="The day of the first activity the retention cohorts know; null when none.",
    )
    funnels = serializers.JSONField(help_text="The user's progress in the funnels (docs/funnels.md).")
    page_now = PageViewSerializer(allow_null=True, help_text="The latest page while online (pages now).")
    visitors = ExportVisitorSerializer(many=True, help_text="Visitor ids that signed in as the user, oldest first.")
    erased_until = serializers.CharField(allow_null=True, help_text="Set while a recent erase keeps the id tombstoned.")
    database = ExportRowSerializer(allow_null=True, help_text="The flushed row.")


class RetentionQuerySerializer(QuerySerializer):
    """``?by=&period=&cohorts=&periods=&group=`` of ``GET /api/v1/retention/``: cohorts and periods
    bounded by the period (90 days, 26 weeks), each error naming its field."""

    by = serializers.ChoiceField(
        choices=["first_seen", "signup"],
        required=False,
        default="first_seen",
        help_text="first_seen: cohorts by first activity; signup: by the user's date_joined.",
    )
    period = serializers.ChoiceField(
        choices=["day", "week"], required=False, default="day", help_text="Local days, or ISO weeks (Monday first)."
    )
    cohorts = QueryIntegerField(
        min_value=1,
        max_value=90,
        required=False,
        default=7,
        help_text="Cohorts, the current period's last: 1..90 days or 1..26 weeks.",
    )
    periods = QueryIntegerField(
        min_value=1,
        max_value=90,
        required=False,
        default=7,
        help_text="Periods per cohort, its own first: 1..90 days or 1..26 weeks.",
    )
    group = QueryIntegerField(
        min_value=1, max_value=MAX_ROW_ID, required=False, help_text="Count only this auth group's members."
    )

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        """Weeks stop at 26 where days go to 90 (the fields' own bound)."""
        bound = {"day": 90, "week": 26}[data["period"]]
        errors = {
            name: [f"Ensure this value is at most {bound} when period is {data['period']}."]
            for name in ("cohorts", "periods")
            if data[name] > bound
        }
        if errors:
            raise serializers.ValidationError(errors)
        return data


class RetentionCohortSerializer(serializers.Serializer):
    start = serializers.DateField(help_text="The cohort's first day (a Monday for weeks), local.")
    size = serializers.IntegerField(help_text="Users in the cohort (and the group).")
    retained = serializers.ListField(
        child=serializers.IntegerField(allow_null=True),
        help_text="retained[k]: of the cohort, users active in period start+k; periods not yet reached left "
        "out. null: a group's cell of a period no longer in Redis (the rollup keeps site-wide cells only), "
        "or a site-wide one the rollup never wrote.",
    )


class RetentionSerializer(serializers.Serializer):
    by = serializers.CharField(help_text="first_seen or signup, as asked.")
    period = serializers.CharField(help_text="day or week, as asked.")
    time_zone = serializers.CharField(help_text="The calendar zone cutting the days (ACTIVITY_TIME_ZONE).")
    cohorts = RetentionCohortSerializer(many=True, help_text="Oldest first.")


class TextField(serializers.CharField):
    """A string, and only a string: DRF's ``CharField`` takes a number and stores its digits."""

    default_error_messages = {"invalid": "Must be a string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


@extend_schema_field(
    {
        "type": "array",
        "minItems": MIN_STEPS,
        "maxItems": MAX_STEPS,
        "items": {"type": "string", "maxLength": MAX_PATH_LENGTH, "pattern": STEP_PATTERN},
        "description": Funnel._meta.get_field("steps").help_text,
    }
)
class FunnelStepsField(serializers.JSONField):
    """The steps, checked by the model's rule (``funnel_rules.validate_steps``), as the admin does."""


class FunnelSerializer(serializers.ModelSerializer):
    """A funnel's definition: the model's rules (``activity.funnel_rules``) checked, as the admin
    checks them, and at most ``MAX_FUNNELS`` defined."""

    name = TextField(
        min_length=1,
        max_length=100,
        trim_whitespace=False,
        validators=[RegexValidator(r"^[^\x00]*$", "No NUL characters.")],
    )
    steps = FunnelStepsField(validators=[validate_steps])

    class Meta:
        model = Funnel
        fields = ["id", "name", "steps", "window", "mode", "created"]
        read_only_fields = ["id", "created"]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        funnels.check_room()
        return attrs


class FunnelListSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    results = FunnelSerializer(many=True)


class FunnelQuerySerializer(QuerySerializer):
    period = serializers.ChoiceField(
        choices=calendar.PERIODS, required=False, default="day", help_text="In ACTIVITY_TIME_ZONE."
    )
    date = serializers.DateField(
        required=False, help_text="A day of the period, YYYY-MM-DD; default today (in ACTIVITY_TIME_ZONE)."
    )


class FunnelStepSerializer(serializers.Serializer):
    step = serializers.IntegerField()
    path = serializers.CharField()
    people = serializers.IntegerField(help_text="People who entered in the period and reached this step.")
    conversion = serializers.FloatField(help_text="Of step 1's people.")
    from_previous = serializers.FloatField(help_text="Of the previous step's people.")
    dropped = serializers.IntegerField(help_text="The previous step's people who did not reach this one.")


class FunnelReportSerializer(serializers.Serializer):
    """Response shape of ``GET /api/v1/funnels/<id>/`` (schema only: the service builds the body)."""

    funnel = serializers.IntegerField()
    name = serializers.CharField()
    mode = serializers.CharField()
    window = serializers.IntegerField()
    period = serializers.CharField()
    start = serializers.DateField(help_text="The period's first day.")
    steps = FunnelStepSerializer(many=True)
