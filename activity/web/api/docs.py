"""The OpenAPI document and its interactive page, served by drf-spectacular's views with the app's
own configuration: open to anyone, throttled, JSON errors, whatever the site's ``REST_FRAMEWORK``.
The document describes the app's operations only, under its own title, whatever other DRF views
and ``SPECTACULAR_SETTINGS`` the site has; the page loads Swagger UI from the sidecar's static files
(``drf_spectacular_sidecar`` in ``INSTALLED_APPS``), from the site itself, never from a CDN.

``drf_spectacular`` itself need not be an installed app: the page's templates are read from its
package. Installed, it registers a deploy check that builds one document of every DRF view of the
site, which fails (``drf_spectacular.E001``) on any view of the site's own whose schema class is
not drf-spectacular's, DRF's default; so a site that does not use drf-spectacular leaves it out."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib.resources import files
from typing import Any

from django.template.backends.django import DjangoTemplates, Template
from drf_spectacular.settings import patched_settings
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.permissions import AllowAny
from rest_framework.renderers import TemplateHTMLRenderer
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


@functools.cache
def spectacular_templates() -> DjangoTemplates:
    """A template engine of drf-spectacular's own templates, read from its package."""
    folder = files("drf_spectacular") / "templates"
    return DjangoTemplates({"NAME": "drf_spectacular", "DIRS": [str(folder)], "APP_DIRS": False, "OPTIONS": {}})


class SpectacularTemplateRenderer(TemplateHTMLRenderer):
    """DRF's template renderer, finding the template among drf-spectacular's, whatever the site's
    ``TEMPLATES`` and ``INSTALLED_APPS``."""

    def resolve_template(self, template_names: Sequence[str]) -> Template:
        return spectacular_templates().get_template(template_names[0])  # the view names one


class DocsView(OwnConfiguration, SpectacularSwaggerView):
    permission_classes = [AllowAny]
    renderer_classes = [SpectacularTemplateRenderer]
    title = DOCUMENT["TITLE"]

    @operation(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        with patched_settings(FROM_THE_SITE):  # as SpectacularAPIView applies its custom_settings
            return super().get(request, *args, **kwargs)
