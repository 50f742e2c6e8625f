"""``/healthz``: 200 when Redis and the database answer, 503 naming the part that does not.

With Redis up it also shows the flush backlog and lag; a slow flush is worth a look but the
service still answers, so it never turns the status into a 503.
"""

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from activity import flush, services
from activity.errors import StoreUnavailable


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    parts: dict[str, object] = dict(services.health())
    healthy = parts["redis"] == "ok" and parts["database"] == "ok"
    if parts["redis"] == "ok":
        try:
            parts["flush"] = flush.status().as_dict()
        except StoreUnavailable as error:
            parts["redis"] = f"unavailable: {error}"
            healthy = False
    response = JsonResponse(parts, status=200 if healthy else 503)
    if not healthy:
        response["Retry-After"] = "5"
    return response
