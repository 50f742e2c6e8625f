"""What kind of traffic a request is, and whether its browser opted out (docs/privacy.md):

- ``MACHINE``: authenticated by an API credential (``request.auth`` set; a session sets none);
- ``BOT``: a crawler's user agent (``crawlerdetect`` plus ``ACTIVITY_BOT_PATTERNS``), or none;
- ``PERSON``: everything else.

Each distinct user agent is classified once per process: the library's expression is costly.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

from crawlerdetect import CrawlerDetect
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest

from activity import conf

PERSON, BOT, MACHINE = "person", "bot", "machine"
AGENT_CACHE_SIZE = 4096  # distinct user-agent strings remembered per process
# Characters of a user agent classified (and cached): browsers send 100-300; the library's
# expression costs time in proportion, so a client sending 8 KiB cannot make it cost 30 times more.
AGENT_PREFIX = 512


def bot_patterns(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    """The site's patterns as one case-insensitive expression; ImproperlyConfigured naming the first
    that is not a valid regular expression."""
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as error:
            message = f"ACTIVITY_BOT_PATTERNS: {pattern!r} is not a regular expression ({error})"
            raise ImproperlyConfigured(message) from None
    return re.compile("|".join(f"(?:{pattern})" for pattern in patterns), re.IGNORECASE) if patterns else None


@functools.lru_cache(maxsize=4)
def _detector(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    """A cached user-agent classifier for one setting of ``ACTIVITY_BOT_PATTERNS``."""
    site = bot_patterns(patterns)
    library = CrawlerDetect()

    @functools.lru_cache(maxsize=AGENT_CACHE_SIZE)
    def is_crawler(agent: str) -> bool:
        return library.is_crawler(agent) or (site is not None and site.search(agent) is not None)

    return is_crawler


def is_bot(user_agent: str) -> bool:
    """A crawler's user agent (read up to ``AGENT_PREFIX`` characters), or none at all (blank)."""
    return not user_agent.strip() or _detector(conf.settings.BOT_PATTERNS)(user_agent[:AGENT_PREFIX])


def classify(request: HttpRequest) -> str:
    """``PERSON``, ``BOT`` or ``MACHINE`` (see the module's docstring)."""
    user = getattr(request, "user", None)
    if getattr(request, "auth", None) is not None and user is not None and user.is_authenticated:
        return MACHINE
    if is_bot(request.META.get("HTTP_USER_AGENT", "")):
        return BOT
    return PERSON


def opted_out(request: HttpRequest) -> bool:
    """The browser sent Global Privacy Control or Do Not Track and the site honours it."""
    signals = (request.META.get("HTTP_SEC_GPC", ""), request.META.get("HTTP_DNT", ""))
    return conf.settings.HONOR_GPC and any(signal.strip() == "1" for signal in signals)
