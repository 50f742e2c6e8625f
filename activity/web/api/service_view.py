"""The base of every API view. Authentication and throttles cost no query or Redis command once
warm, so a request's one round trip is its own work; a signed-in caller's activity goes to the
process's batches once the request succeeded, and the middleware leaves the request alone."""

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
