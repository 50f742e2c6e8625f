"""The base of every API view: one Redis round trip per request, everything included.

DRF runs authentication (``CachedTokenAuthentication``: no query once the token is known), the
permission checks and the throttles (their count rides along, ``activity.rate_limits``) before the
view; then the caller's own activity is queued the same way (``services.record_caller``). Whatever
the view sends to Redis first carries both, and a view that sends nothing sends them at the end.
So the tracking middleware leaves these requests alone (``RECORDED``). The renderer is chosen
without parsing ``Accept`` in the common cases (``api.negotiation``).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponseBase
from rest_framework.request import Request
from rest_framework.views import APIView

from activity import services, traffic
from activity.api.negotiation import ContentNegotiation
from activity.errors import InvalidValue
from activity.events import clean_user
from activity.middleware import RECORDED, tracks_request


class ServiceView(APIView):
    content_negotiation_class = ContentNegotiation

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        with services.one_round_trip() as send_rest:
            response = super().dispatch(request, *args, **kwargs)
            send_rest(response.status_code < 400)
            return response

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        user = request.user
        if user is None or not user.is_authenticated or not tracks_request(request._request):
            return
        try:
            services.record_caller(clean_user(str(user.pk)), user.get_username(), traffic.classify(request))
        except InvalidValue:  # a primary key no user id can carry: not tracked, as in the middleware
            return
        setattr(request._request, RECORDED, True)
