"""The base of every API view: the caller's own activity goes with the process's tracking batches.

DRF runs authentication (``CachedTokenAuthentication``: no query once the token is known), the
permission checks and the throttles (``throttles``: no Redis command on the request's path) before
the view, so a request's only Redis round trip is its own work. A signed-in caller's activity (last
seen, active today) goes where the tracking middleware sends a page's, into the process's batches
(``activity.services.tracking``), once the request has succeeded; the middleware then leaves the
request alone (``RECORDED``).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponseBase
from rest_framework.request import Request
from rest_framework.views import APIView

from activity import clock
from activity.errors import InvalidValue
from activity.events import Event, clean_user
from activity.services import tracking, traffic
from activity.services.tracking import Activity
from activity.web.middleware import RECORDED, tracks_request


class ServiceView(APIView):
    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        self.caller_activity: Activity | None = None  # set by initial() for a tracked caller
        response = super().dispatch(request, *args, **kwargs)
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
        self.caller_activity = Activity(kind, event=Event(caller, clock.now()), name=user.get_username())
        setattr(request._request, RECORDED, True)
