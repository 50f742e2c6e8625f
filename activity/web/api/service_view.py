"""The base of every API view: one Redis round trip per request, everything included.

DRF runs authentication (``CachedTokenAuthentication``: no query once the token is known), the
permission checks and the throttles (their count rides along, ``activity.services.rate_limits``) before the
view. The caller's own activity goes where the tracking middleware sends a page's: into the
process's batches (``activity.services.tracking``) once the request has succeeded, so it costs the
request no command at all; with ``ACTIVITY_TRACK_BATCH_MS`` = 0 it rides along instead
(``ingest.record_caller``). Whatever the view sends to Redis first carries the riders, and a view
that sends nothing sends them at the end. Either way the middleware leaves these requests alone
(``RECORDED``). The renderer is chosen without parsing ``Accept`` in the common cases
(``api.negotiation``).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponseBase
from rest_framework.request import Request
from rest_framework.views import APIView

from activity import clock, conf
from activity.errors import InvalidValue
from activity.events import Event, clean_user
from activity.services import ingest, tracking, traffic
from activity.services.tracking import Activity
from activity.web.api.negotiation import ContentNegotiation
from activity.web.middleware import RECORDED, tracks_request


class ServiceView(APIView):
    content_negotiation_class = ContentNegotiation

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        self.caller_activity: Activity | None = None  # set by initial() when the caller joins the batches
        with ingest.one_round_trip() as send_rest:
            response = super().dispatch(request, *args, **kwargs)
            send_rest(response.status_code < 400)
        if self.caller_activity is not None and response.status_code < 400:
            tracking.record(self.caller_activity)
        return response

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        user = request.user
        if user is None or not user.is_authenticated or not tracks_request(request._request):
            return
        try:
            caller = clean_user(str(user.pk))
        except InvalidValue:  # a primary key no user id can carry: not tracked, as in the middleware
            return
        kind = traffic.classify(request)
        if conf.settings.TRACK_BATCH_MS > 0:
            self.caller_activity = Activity(kind, event=Event(caller, clock.now()), name=user.get_username())
        else:
            ingest.record_caller(caller, user.get_username(), kind)
        setattr(request._request, RECORDED, True)
