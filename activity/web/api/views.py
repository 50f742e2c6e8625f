"""Thin views: validate with serializers, call activity.services, shape the answer."""

from __future__ import annotations

from typing import Any

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponseBase, StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotAcceptable, NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from activity import calendar, conf
from activity.errors import InvalidValue, UnknownPath
from activity.events import USER_ID_PATTERN, clean_user, iso
from activity.funnel_rules import MAX_FUNNELS
from activity.models import Funnel
from activity.schedule import REPORT_REFRESH_INTERVAL
from activity.services import (
    audience,
    cohorts,
    funnels,
    groups,
    health,
    idempotency,
    ingest,
    last_seen,
    live,
    pages_now,
    privacy,
    recommendations,
    reports,
    sessions,
)
from activity.web.api import live as live_stream
from activity.web.api import serializers as s
from activity.web.api.authentication import still_allowed
from activity.web.api.openapi import HEADERS, operation, responses
from activity.web.api.pagination import next_link, page_links
from activity.web.api.permissions import (
    CanDefineFunnels,
    CanErase,
    CanExportOrSelf,
    CanIngest,
    CanView,
    CanViewOrSelf,
)
from activity.web.api.renderers import PrometheusRenderer
from activity.web.api.service_view import ServiceView
from activity.web.api.throttles import ScopedRateThrottle

USER_PARAMETER = OpenApiParameter(
    "user", str, OpenApiParameter.PATH, pattern=f"^{USER_ID_PATTERN}$", description="A user id."
)


def cache_header(description: str | None = None) -> OpenApiParameter:
    """The ``X-Cache`` header of a read served from a cached copy: fresh, built for it, or stale."""
    return OpenApiParameter(
        "X-Cache",
        str,
        OpenApiParameter.HEADER,
        enum=["hit", "miss", "stale"],
        required=True,
        response=[200],
        description=description,
    )


def user_from_url(value: str) -> str:
    """The ``<user>`` URL argument, validated like any other user id (400 when malformed)."""
    try:
        return clean_user(value)
    except InvalidValue as error:
        raise ValidationError({"user": [str(error)]}) from None


IDEMPOTENCY_HEADERS = [
    OpenApiParameter(
        "Idempotency-Key",
        str,
        OpenApiParameter.HEADER,
        pattern="^[!-~]([ -~]{0,253}[!-~])?$",
        description="1-255 printable ASCII characters (HTTP drops a space first or last), the caller's own. "
        "Makes a retry harmless: the first answer is kept 24 h and a repeat with the same key and body gets "
        "it again (`Idempotent-Replayed: true`), writing nothing; the same key with another body is 422, a "
        "repeat while the first still runs 409. Without a key, a replayed batch counts its page views again.",
    ),
    OpenApiParameter(
        "Idempotent-Replayed",
        str,
        OpenApiParameter.HEADER,
        enum=["true"],
        response=[202],
        description="Present when the answer is the kept one of an earlier request with this key.",
    ),
    OpenApiParameter(
        "Retry-After",
        int,
        OpenApiParameter.HEADER,
        required=True,
        response=[409, 429, 503],
        description="Seconds to wait before retrying.",
    ),
]


class EventsView(ServiceView):
    permission_classes = [CanIngest]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "ingest"

    @operation(
        request=s.EventBatchSerializer,
        parameters=[*HEADERS, *IDEMPOTENCY_HEADERS],
        responses=responses({202: s.IngestResultSerializer}, 400, 409, 413, 415, 422),
    )
    def post(self, request: Request) -> Response:
        key = request.headers.get("Idempotency-Key")
        if key is not None:
            try:
                idempotency.clean_key(key)
            except InvalidValue as error:
                raise ValidationError({"Idempotency-Key": [str(error)]}) from None
        events = s.clean_batch(request.data)

        def record(fence: Any = None) -> dict[str, Any]:
            result = ingest.record_events(events, fence=fence, day_writes=ingest.PROCESS_DAY_WRITES)
            return {"accepted": result.accepted, "last_seen_updated": result.last_seen_updated}

        if key is None:
            return Response(record(), status=status.HTTP_202_ACCEPTED)
        # Keys are the caller's own: the user the token or session authenticates.
        answer = idempotency.once(f"user:{request.user.pk}", key, request.data, record, status.HTTP_202_ACCEPTED)
        replayed = {"Idempotent-Replayed": "true"} if answer.replayed else None
        return Response(answer.body, status=answer.status, headers=replayed)


class LastSeenView(ServiceView):
    permission_classes = [CanViewOrSelf]

    @operation(parameters=[USER_PARAMETER, *HEADERS], responses=responses({200: s.LastSeenSerializer}, 400, 404))
    def get(self, request: Request, user: str) -> Response:
        seen = last_seen.get(user_from_url(user))
        if seen is None:
            raise NotFound("This user has never been seen.")
        return Response({"user": seen.user, "ts": seen.ts, "last_seen": iso(seen.ts), "online": seen.online})


class OnlineView(ServiceView):
    permission_classes = [CanView]

    @operation(parameters=[s.OnlineQuerySerializer, *HEADERS], responses=responses({200: s.OnlinePageSerializer}, 400))
    def get(self, request: Request) -> Response:
        query = s.OnlineQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        within = query.validated_data.get("within", conf.settings.ONLINE_WINDOW)
        size = query.validated_data["page_size"]
        rows, count = last_seen.online_page(within, size + 1, query.validated_data.get("cursor"))
        page, more = rows[:size], len(rows) > size
        return Response(
            {
                "count": count,
                "next": next_link(request, page[-1][1], page[-1][0]) if more else None,
                "results": [{"user": user, "ts": ts, "last_seen": iso(ts)} for user, ts in page],
            }
        )


class PagesNowView(ServiceView):
    """The pages the people online are on, most people first (activity.services.pages_now)."""

    permission_classes = [CanView]

    @operation(parameters=[s.PagesNowQuerySerializer, *HEADERS], responses=responses({200: s.PagesNowSerializer}, 400))
    def get(self, request: Request) -> Response:
        query = s.PagesNowQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        return Response({"window": conf.settings.ONLINE_WINDOW, "results": pages_now.top(query.validated_data["n"])})


class LiveView(ServiceView):
    """Server-Sent Events: the stats and pages now, at once and on each change (``web.api.live``),
    for a request that accepts ``text/event-stream``; any other gets the figures once, as JSON.
    Streamed by an ASGI server or ``make run``'s front, holding no thread; any other WSGI server would
    hold one per client, so there it is refused (406) and the dashboard refreshes instead."""

    permission_classes = [CanView]

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        return super().perform_content_negotiation(request, force=True)  # errors are JSON, whatever asked

    @operation(
        parameters=HEADERS,
        responses=responses({200: s.LiveStatsSerializer}, 406),
        description="With `Accept: text/event-stream`: an `event: stats` at once and within a second of each "
        "change (at most one a second), its `data` this JSON on one line; a comment line at least every 15 s; the "
        "stream ends once the caller's token or session no longer gives the permission. 406 under a WSGI server.",
    )
    def get(self, request: Request) -> HttpResponseBase:
        if live_stream.MEDIA_TYPE not in request.META.get("HTTP_ACCEPT", ""):
            return Response(live.snapshot())
        if not (isinstance(request._request, ASGIRequest) or request.META.get(live_stream.ASYNC_STREAMING)):
            raise NotAcceptable("The live stream needs an ASGI server (make run's); this one serves WSGI.")
        allowed = still_allowed(request, CanView.permission)
        response = StreamingHttpResponse(live_stream.events(allowed), content_type=live_stream.MEDIA_TYPE)
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
        return response


class StatsView(ServiceView):
    """Audience figures in one Redis round trip (see activity.services.audience.stats)."""

    permission_classes = [CanView]

    @operation(parameters=HEADERS, responses=responses({200: s.StatsSerializer}))
    def get(self, request: Request) -> Response:
        return Response(audience.stats().as_api())


class SessionView(ServiceView):
    permission_classes = [CanViewOrSelf]

    @operation(
        parameters=[USER_PARAMETER, s.SessionQuerySerializer, *HEADERS],
        responses=responses({200: s.SessionPageSerializer}, 400, 404),
    )
    def get(self, request: Request, user: str) -> Response:
        user = user_from_url(user)
        query = s.SessionQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        page, size = query.validated_data["page"], query.validated_data["page_size"]
        found = sessions.page(user, page, size)
        if found is None:
            raise NotFound("This user has no live navigation session.")
        following, previous = page_links(request, page, size, found.count)
        return Response(
            {
                "user": user,
                "expires_in": found.expires_in,
                "count": found.count,
                "next": following,
                "previous": previous,
                "results": [{"path": path, "ts": ts, "at": iso(ts)} for path, ts in found.views],
            }
        )


class ReportListView(ServiceView):
    permission_classes = [CanView]

    @operation(operation_id="reports_list", parameters=HEADERS, responses=responses({200: s.ReportListSerializer}))
    def get(self, request: Request) -> Response:
        found = [{"name": name, "description": text} for name, text in reports.catalogue()]
        return Response({"count": len(found), "results": found})


class ReportView(ServiceView):
    permission_classes = [CanView]

    @operation(
        parameters=[
            OpenApiParameter("name", str, OpenApiParameter.PATH, enum=list(reports.REGISTRY)),
            s.ReportQuerySerializer,
            cache_header(
                "hit: a fresh copy (active-by-name: every viewer so far is in); miss: built for this request; "
                "stale: the previous copy, served while another client rebuilds it (active-by-name: some new "
                "viewers are not merged in yet and are missing; the refresh job merges them, normally within "
                f"{REPORT_REFRESH_INTERVAL} seconds)."
            ),
            *HEADERS,
        ],
        responses=responses({200: s.ReportPageSerializer}, 400, 404),
    )
    def get(self, request: Request, name: str) -> Response:
        if name not in reports.REGISTRY:
            raise NotFound("No such report; GET /api/v1/reports/ lists them.")
        query = s.ReportQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        period, page, size = (query.validated_data[field] for field in ("period", "page", "page_size"))
        found, cache = reports.page(name, period, page, size)
        following, previous = page_links(request, page, size, found.count)
        body = {
            "report": name,
            "period": period,
            "generated_at": iso(found.generated_at),
            "expires_in": found.expires_in,
            "count": found.count,
            "next": following,
            "previous": previous,
            "results": found.rows,
        }
        return Response(body, headers={"X-Cache": cache})


def row_parameter(name: str) -> OpenApiParameter:
    """A URL argument naming a database row as the schema states it (``serializers.row_id`` reads it)."""
    return OpenApiParameter(name, {"type": "integer", "minimum": 1, "maximum": s.MAX_ROW_ID}, OpenApiParameter.PATH)


GROUP_ID = row_parameter("group_id")


def group_from_url(value: str) -> int:
    """The ``<group_id>`` URL argument: an integer from 1 to MAX_ROW_ID, spelled without leading
    zeros (``01`` is not another name for group 1); 400 otherwise."""
    return s.row_id("group_id", value)


class GroupMembersView(ServiceView):
    """Members of a Django auth group, most recently seen first, never-seen members last."""

    permission_classes = [CanView]

    @operation(
        parameters=[
            GROUP_ID,
            s.PageQuerySerializer,
            *HEADERS,
        ],
        responses=responses({200: s.GroupMembersPageSerializer}, 400, 404),
    )
    def get(self, request: Request, group_id: str) -> Response:
        group = group_from_url(group_id)
        query = s.PageQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        number, size = query.validated_data["page"], query.validated_data["page_size"]
        page = groups.members_page(group, (number - 1) * size, size)
        if page is None:
            raise NotFound("No such group.")
        following, previous = page_links(request, number, size, page.count)
        results = [{"user": user, "ts": ts, "last_seen": None if ts is None else iso(ts)} for user, ts in page.rows]
        return Response(
            {"group": group, "count": page.count, "next": following, "previous": previous, "results": results}
        )


class GroupActiveView(ServiceView):
    """How many members of a Django auth group were active today, this week or this month."""

    permission_classes = [CanView]

    @operation(
        parameters=[
            GROUP_ID,
            s.GroupActiveQuerySerializer,
            *HEADERS,
        ],
        responses=responses({200: s.GroupActiveSerializer}, 400, 404),
        description="One Redis round trip: the group's membership bitmap AND the period's active-user bitmap.",
    )
    def get(self, request: Request, group_id: str) -> Response:
        group = group_from_url(group_id)
        query = s.GroupActiveQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        found = groups.active_members(group, query.validated_data["period"])
        if found is None:
            raise NotFound("No such group.")
        return Response(found.as_api())


FUNNEL_ID = row_parameter("funnel_id")


def funnel_from_url(value: str) -> Funnel:
    """The ``<funnel_id>`` URL argument's funnel: 400 for a malformed id, 404 for an unknown one."""
    funnel = funnels.get(s.row_id("funnel_id", value))
    if funnel is None:
        raise NotFound("No such funnel.")
    return funnel


class FunnelListView(ServiceView):
    """The funnels defined (GET), or a new one (POST: counted from now on, docs/funnels.md)."""

    def get_permissions(self) -> list[Any]:
        return [CanDefineFunnels()] if self.request.method == "POST" else [CanView()]

    @operation(
        operation_id="api_v1_funnels_list", responses=responses({200: s.FunnelListSerializer}), parameters=HEADERS
    )
    def get(self, request: Request) -> Response:
        found = s.FunnelSerializer(funnels.defined(), many=True).data
        return Response({"count": len(found), "results": found})

    @operation(
        request=s.FunnelSerializer,
        responses=responses({201: s.FunnelSerializer}, 400),
        parameters=HEADERS,
        description=f"At most {MAX_FUNNELS} funnels; counts start with the page views after this answer.",
    )
    def post(self, request: Request) -> Response:
        definition = s.FunnelSerializer(data=request.data)
        definition.is_valid(raise_exception=True)
        definition.save()
        return Response(definition.data, status=status.HTTP_201_CREATED)


class FunnelView(ServiceView):
    """A funnel's people at each step in a day, ISO week or month (GET), or its removal (DELETE)."""

    def get_permissions(self) -> list[Any]:
        return [CanDefineFunnels()] if self.request.method == "DELETE" else [CanView()]

    @operation(
        parameters=[FUNNEL_ID, s.FunnelQuerySerializer, *HEADERS],
        responses=responses({200: s.FunnelReportSerializer}, 400, 404),
        description="Live from Redis (one round trip) while the period's counts can still change; from the "
        "rollup's rows once it is final.",
    )
    def get(self, request: Request, funnel_id: str) -> Response:
        funnel = funnel_from_url(funnel_id)
        query = s.FunnelQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        day = query.validated_data.get("date") or calendar.today()
        return Response(funnels.report(funnel, query.validated_data["period"], day))

    @operation(parameters=[FUNNEL_ID, *HEADERS], responses=responses({204: None}, 400, 404))
    def delete(self, request: Request, funnel_id: str) -> Response:
        funnels.delete(funnel_from_url(funnel_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class RecommendationsView(ServiceView):
    """The pages most often visited next after the user's latest pages (see activity.services.recommendations)."""

    permission_classes = [CanViewOrSelf]

    @operation(
        parameters=[USER_PARAMETER, s.RecommendationsQuerySerializer, *HEADERS],
        responses=responses({200: s.RecommendationsSerializer}, 400, 404),
        description="Best first; pages already in the session are left out. No live session: 200 with no "
        "results (404 only for a user id that matches no URL, as for every user route).",
    )
    def get(self, request: Request, user: str) -> Response:
        user = user_from_url(user)
        query = s.RecommendationsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        found = recommendations.for_user(user, query.validated_data["n"])
        return Response({"user": user, "results": [{"path": path, "score": score} for path, score in found]})


class NextPagesView(ServiceView):
    """Distinct random picks among the pages that followed a page, weighted by how often each did."""

    permission_classes = [CanView]

    @operation(
        parameters=[
            s.NextPagesQuerySerializer,
            cache_header(),
            *HEADERS,
        ],
        responses=responses({200: s.NextPagesSerializer}, 400, 404),
        description="n distinct pages (fewer when fewer followed); 404 when no page followed `path` in the "
        "window (or it is never recorded as a page view).",
    )
    def get(self, request: Request) -> Response:
        query = s.NextPagesQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        try:
            path, picks, cache = recommendations.next_pages(query.validated_data["path"], query.validated_data["n"])
        except UnknownPath as error:
            raise NotFound(str(error)) from None
        return Response({"path": path, "results": [{"path": pick} for pick in picks]}, headers={"X-Cache": cache})


class RetentionView(ServiceView):
    """Retention cohorts: of the users first active (or signed up) in a day or week, how many came back."""

    permission_classes = [CanView]

    @operation(
        parameters=[
            s.RetentionQuerySerializer,
            cache_header(),
            *HEADERS,
        ],
        responses=responses({200: s.RetentionSerializer}, 400, 404),
        description="Signed-in users with integer ids (docs/cohorts.md), cut at the calendar zone's local "
        "midnight. A cached table (the reports' TTL), rebuilt by one client at a time. An unknown group is a "
        "404, as on the group routes.",
    )
    def get(self, request: Request) -> Response:
        query = s.RetentionQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        try:
            body, cache = cohorts.table(cohorts.Query(**query.validated_data))
        except cohorts.UnknownGroup:
            raise NotFound("No such group.") from None
        return Response(body, headers={"X-Cache": cache})


@extend_schema(exclude=True)
class MetricsView(ServiceView):
    """``GET /metrics`` for Prometheus (a scraper signs in with the token of a user holding
    ``activity.view_activity``); its errors are JSON, as every error of the app's views."""

    permission_classes = [CanView]
    renderer_classes = [PrometheusRenderer]
    throttle_classes = []

    def get(self, request: Request) -> Response:
        return Response(health.exposition())


class UserActivityView(ServiceView):
    """Erase a user's activity everywhere (see activity.services.privacy)."""

    permission_classes = [CanErase]

    @operation(
        operation_id="users_activity_erase",
        parameters=[USER_PARAMETER, *HEADERS],
        responses=responses({204: None}, 400, 404),
        description="Removes the user from every Redis structure (last seen, flush queue, session, names, "
        "page-view counters and rankings, group views, active-user bitmaps, first-visit store) and deletes "
        "their database row, then keeps the id tombstoned for an hour (or longer) so late "
        "events and a running flush cannot bring it back. Done when the answer comes (204); idempotent. "
        "HyperLogLog registers cannot forget an id that is not a small integer (docs/privacy.md). 404: "
        "nothing is known of the user (no Django user, row or last seen).",
    )
    def delete(self, request: Request, user: str) -> Response:
        user = user_from_url(user)
        if not privacy.is_known(user):
            raise NotFound("Nothing is known of this user.")
        privacy.erase(user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class UserActivityExportView(ServiceView):
    """Everything stored about a user (see activity.services.privacy.export)."""

    permission_classes = [CanExportOrSelf]

    @operation(
        parameters=[USER_PARAMETER, *HEADERS],
        responses=responses({200: s.ExportSerializer}, 400, 404),
        description="Last seen, live session, display names, page views per retained day and week, group "
        "views, active days, first visit and the database row. 404: none of the user's activity is stored "
        "(never seen, or erased; a Django account alone is not activity).",
    )
    def get(self, request: Request, user: str) -> Response:
        found = privacy.export(user_from_url(user))
        if found is None:
            raise NotFound("No activity of this user is stored.")
        return Response(found)
