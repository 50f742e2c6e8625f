"""The OpenAPI document and its interactive page, served by drf-spectacular's views with the app's
own configuration: open to anyone, throttled, JSON errors, whatever the site's ``REST_FRAMEWORK``.
The document describes the app's operations only, under its own title, whatever other DRF views
and ``SPECTACULAR_SETTINGS`` the site has; the page loads Swagger UI from the sidecar's static files
(``drf_spectacular_sidecar`` in ``INSTALLED_APPS``), from the site itself, never from a CDN."""

from __future__ import annotations

from typing import Any

from drf_spectacular.settings import patched_settings
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from activity.web.api.openapi import operation
from activity.web.api.service_view import OwnConfiguration, ServiceView

DOCUMENT = {
    "TITLE": "Activity tracking service",
    "DESCRIPTION": "Last seen, online users, navigation sessions and cached reports for a Django site. "
    "Each operation names the permission it needs in `x-permission`.",
    "VERSION": "1.0.0",  # the REST contract's (v1), not the package's
    "PREPROCESSING_HOOKS": ["activity.web.api.docs.service_operations"],
}


def service_operations(endpoints: list[tuple[str, str, str, Any]], **kwargs: Any) -> list[tuple[str, str, str, Any]]:
    """The app's operations among the site's DRF endpoints, (path, regex, method, view callback)
    each: a drf-spectacular preprocessing hook."""
    return [endpoint for endpoint in endpoints if issubclass(getattr(endpoint[3], "cls", object), ServiceView)]


class SchemaView(OwnConfiguration, SpectacularAPIView):
    permission_classes = [AllowAny]
    renderer_classes = SpectacularAPIView.renderer_classes
    custom_settings = DOCUMENT

    @operation(exclude=True)  # in no document, this one or one drf-spectacular's deploy check makes
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)


# Where the page takes Swagger UI's files from: the sidecar app's static files.
FROM_THE_SITE = {"SWAGGER_UI_DIST": "SIDECAR", "SWAGGER_UI_FAVICON_HREF": "SIDECAR"}


class DocsView(OwnConfiguration, SpectacularSwaggerView):
    permission_classes = [AllowAny]
    renderer_classes = SpectacularSwaggerView.renderer_classes
    title = DOCUMENT["TITLE"]

    @operation(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        with patched_settings(FROM_THE_SITE):  # as SpectacularAPIView applies its custom_settings
            return super().get(request, *args, **kwargs)
