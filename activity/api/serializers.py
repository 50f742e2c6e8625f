"""Request and response shapes. Validation rules come from activity.events."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from activity import conf
from activity.api.pagination import decode_cursor
from activity.errors import InvalidBatch, InvalidValue
from activity.events import clean_events, clean_path, clean_ts, clean_user, iso
from activity.reports import PERIODS


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


class UserIdField(_CleanedField):
    cleaner = staticmethod(clean_user)


class TimestampField(_CleanedField):
    cleaner = staticmethod(clean_ts)


class PathField(_CleanedField):
    cleaner = staticmethod(clean_path)


class EventSerializer(serializers.Serializer):
    """One event's shape, for the OpenAPI document; ``EventListField`` validates the batch."""

    user = UserIdField()
    ts = TimestampField(required=False)
    path = PathField(required=False)


class EventListField(serializers.ListField):
    """The batch, validated whole by ``activity.events.clean_events`` (the Celery task's validator
    too); its value is a list of ``Event``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=EventSerializer(), allow_empty=False, **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        try:
            return clean_events(data)
        except InvalidBatch as error:
            raise serializers.ValidationError(error.errors["events"]) from None


class EventBatchSerializer(serializers.Serializer):
    events = EventListField()


class IngestResultSerializer(serializers.Serializer):
    accepted = serializers.IntegerField()
    last_seen_updated = serializers.IntegerField()


class LastSeenSerializer(serializers.Serializer):
    user = serializers.CharField()
    ts = serializers.FloatField()
    last_seen = serializers.SerializerMethodField()
    online = serializers.BooleanField()

    def get_last_seen(self, obj: Any) -> str:
        return iso(obj.ts)


class OnlineUserSerializer(serializers.Serializer):
    user = serializers.CharField()
    ts = serializers.FloatField()
    last_seen = serializers.CharField()


class OnlinePageSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    results = OnlineUserSerializer(many=True)


class _PageSizeSerializer(serializers.Serializer):
    """``page_size`` between 1 and ``ACTIVITY_MAX_PAGE_SIZE`` (read per request, not at import)."""

    page_size = serializers.IntegerField(min_value=1, required=False, default=50)

    def validate_page_size(self, value: int) -> int:
        limit = conf.settings.MAX_PAGE_SIZE
        if value > limit:
            raise serializers.ValidationError(f"Ensure this value is less than or equal to {limit}.")
        return value


class OnlineQuerySerializer(_PageSizeSerializer):
    within = serializers.IntegerField(min_value=1, max_value=86400, required=False)
    cursor = serializers.CharField(required=False)

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
    active = PeriodCountsSerializer(help_text="Active users today / this ISO week / this month (UTC), exact.")
    new_visitors = DayCountSerializer(help_text="Visitors whose first visit ever was today.")
    unique_visitors = PeriodCountsSerializer(help_text="Distinct visitors (HyperLogLog estimate).")
    day = serializers.DateField(help_text="The UTC day the figures are for.")


class PageQuerySerializer(_PageSizeSerializer):
    """``?page=&page_size=`` of page-numbered lists (DRF's PageNumberPagination parameters)."""

    page = serializers.IntegerField(min_value=1, required=False, default=1)


class SessionQuerySerializer(PageQuerySerializer):
    page_size = serializers.IntegerField(min_value=1, required=False, default=20)


class ReportQuerySerializer(PageQuerySerializer):
    period = serializers.ChoiceField(choices=PERIODS, required=False, default="day")


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


class GroupMembersQuerySerializer(PageQuerySerializer):
    """``?page=&page_size=`` of a group's members (page_size default 50)."""


class GroupMemberSerializer(serializers.Serializer):
    user = serializers.CharField()
    ts = serializers.FloatField(allow_null=True)
    last_seen = serializers.CharField(allow_null=True)


class GroupMembersPageSerializer(NumberedPageSerializer):
    group = serializers.IntegerField()
    results = GroupMemberSerializer(many=True)
