"""``/healthz``: 200 when Redis takes a write and the database answers, 503 naming the part that does
not. Only holders of ``view_activity`` (and the log) see error texts and the flush backlog: they name
hosts and internals. A slow flush never makes a 503, since the service still answers."""

import logging

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from activity import permissions
from activity.errors import StoreUnavailable
from activity.services import flush, health

logger = logging.getLogger("activity.health")
RETRY_AFTER_SECONDS = 5


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    details: dict[str, object] = dict(health.status())
    if details["redis"] == "ok":
        try:
            details["flush"] = flush.status().as_dict()
        except StoreUnavailable as error:
            logger.error("healthz: Redis unavailable: %s", error, exc_info=error)
            details["redis"] = f"unavailable: {error}"
    healthy = details["redis"] == "ok" and details["database"] == "ok"
    user = getattr(request, "user", None)
    status = {part: "ok" if details[part] == "ok" else "unavailable" for part in ("redis", "database")}
    body = details if user is not None and user.has_perm(permissions.VIEW_ACTIVITY) else status
    response = JsonResponse(body, status=200 if healthy else 503)
    if not healthy:
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response
