"""The base of the app's API views. They carry their own DRF configuration (``OwnConfiguration``), so
a site's ``REST_FRAMEWORK`` neither has to be set for them nor changes them: authentication,
permissions, parsers, renderers, throttles, content negotiation, the OpenAPI schema class and the
error answers. Authentication and throttles cost no query or Redis command once warm, so a request's
one round trip is its own work; a signed-in caller's activity goes to the process's batches once the
request succeeded, and the middleware leaves the request alone."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from django.http import HttpRequest, HttpResponseBase
from rest_framework.authentication import SessionAuthentication
from rest_framework.metadata import SimpleMetadata
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from activity import clock
from activity.errors import InvalidValue
from activity.events import Event, clean_user
from activity.services import tracking, traffic
from activity.services.tracking import Activity
from activity.web.api import errors, throttles
from activity.web.api.authentication import CachedTokenAuthentication
from activity.web.api.openapi import ServiceSchema
from activity.web.api.parsers import EventJSONParser
from activity.web.api.permissions import CanView
from activity.web.api.renderers import FastJSONRenderer
from activity.web.middleware import RECORDED, tracks_request


class Negotiation(DefaultContentNegotiation):
    """DRF's, with ``?format=`` naming the renderer whatever the site's ``URL_FORMAT_OVERRIDE``."""

    settings = SimpleNamespace(URL_FORMAT_OVERRIDE="format")


class OwnConfiguration:
    """What DRF would otherwise read from the site's ``REST_FRAMEWORK``, set on the app's views. Errors
    are JSON whatever the view renders on success (``/metrics``, the docs page), and an anonymous
    request refused by a permission counts in the ``anon`` throttle scope as any anonymous request."""

    authentication_classes = [CachedTokenAuthentication, SessionAuthentication]
    permission_classes = [CanView]  # each view names its own; one that forgot needs the view permission
    parser_classes = [EventJSONParser]
    renderer_classes = [FastJSONRenderer]
    throttle_classes = [throttles.UserRateThrottle, throttles.AnonRateThrottle]
    content_negotiation_class = Negotiation
    metadata_class = SimpleMetadata
    versioning_class = None
    schema = ServiceSchema()

    def get_exception_handler(self) -> Any:
        return errors.exception_handler

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        response = super().finalize_response(request, response, *args, **kwargs)
        if isinstance(response, Response) and response.exception:
            response.accepted_renderer = FastJSONRenderer()
            response.accepted_media_type = FastJSONRenderer.media_type
        return response

    def permission_denied(self, request: Request, message: str | None = None, code: str | None = None) -> None:
        if request.authenticators and not request.successful_authenticator:
            throttles.count_unauthenticated(request)  # 429 rather than 401 once the address is over
        super().permission_denied(request, message, code)


class ServiceView(OwnConfiguration, APIView):
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
