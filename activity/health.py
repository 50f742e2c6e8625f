"""``/healthz``: 200 when Redis and the database answer, 503 naming the part that does not."""

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from activity import services


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    parts = services.health()
    healthy = all(value == "ok" for value in parts.values())
    response = JsonResponse(parts, status=200 if healthy else 503)
    if not healthy:
        response["Retry-After"] = "5"
    return response
