"""What a funnel's definition may be (the API's, the admin's and the model's rules alike) and what
its steps match: a step is an exact path, or a prefix ending in ``*`` that matches every path
beginning with it. Paths are matched as page views record them (``services.sessions.page_path``)."""

from __future__ import annotations

from django.core.exceptions import ValidationError

from activity.errors import InvalidValue
from activity.events import clean_path

MIN_STEPS, MAX_STEPS = 2, 32
MIN_WINDOW, MAX_WINDOW = 60, 30 * 86400  # seconds
# Funnels defined at once: each is a few arguments of every page-view call and a field of each
# entrant's state, so their number is bounded like every other cost.
MAX_FUNNELS = 32
# A step as a JSON Schema pattern (the OpenAPI document's): what ``validate_steps`` takes.
STEP_PATTERN = r"^/[^?#*\x00]*\*?$"


def validate_steps(value: object) -> None:
    """Raise ``ValidationError`` naming the first bad step: 2-32 paths, each starting with ``/``,
    without a query string, ``*`` only as the last character."""
    if not isinstance(value, list) or not MIN_STEPS <= len(value) <= MAX_STEPS:
        raise ValidationError(f"Give a list of {MIN_STEPS} to {MAX_STEPS} paths.")
    for number, step in enumerate(value, 1):
        try:
            clean_path(step)  # a string of a page view's length, encodable
        except InvalidValue as error:
            raise ValidationError(f"Step {number}: {error}") from None
        if not step.startswith("/") or "\0" in step:
            raise ValidationError(f"Step {number}: must be a path starting with /, without NUL characters.")
        if "?" in step or "#" in step:
            raise ValidationError(f"Step {number}: a path without query string or fragment (page views drop them).")
        if "*" in step[:-1]:
            raise ValidationError(f"Step {number}: * may only end a path, as a prefix.")


def step_matches(step: str, path: str) -> bool:
    """Whether a page view of ``path`` matches ``step``."""
    return path.startswith(step[:-1]) if step.endswith("*") else path == step
