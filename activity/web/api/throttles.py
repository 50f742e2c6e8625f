"""DRF throttles on the service's own counters (``services.rate_limits``) at the rates of
``ACTIVITY_THROTTLE_RATES``: O(1) state per client and no Redis command on the request's path.
Unlike DRF's, ``X-Forwarded-For`` is believed only from ``ACTIVITY_TRUSTED_PROXIES``, so a client
rotating the header is not a new client each time. Every request that ends unauthenticated, a failed
authentication included, counts in the ``anon`` scope by address (``count_unauthenticated``)."""

from __future__ import annotations

import ipaddress
from typing import Any

from rest_framework.exceptions import Throttled
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from activity import conf
from activity.services import rate_limits, tracking

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _networks(entries: tuple[str, ...]) -> list[Network]:
    return [ipaddress.ip_network(entry, strict=False) for entry in entries]


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def client_address(request: Request) -> str:
    """The client's IP address: ``REMOTE_ADDR``, or, when that is a trusted proxy, the nearest
    address in ``X-Forwarded-For`` that is not one (read right to left; a malformed entry ends the
    walk at the last proxy)."""
    remote = _address(request.META.get("REMOTE_ADDR", "")) or ipaddress.ip_address("0.0.0.0")
    trusted = _networks(conf.settings.TRUSTED_PROXIES)
    if not trusted:
        return str(remote)
    client = remote
    hops = request.headers.get("x-forwarded-for", "").split(",")
    for hop in reversed(hops):
        if not any(client in network for network in trusted):
            break
        forwarded = _address(hop)
        if forwarded is None:
            break
        client = forwarded
    return str(client)


def address_ident(request: Request) -> str:
    """How a client without a user is counted: by its address."""
    return f"ip:{client_address(request)}"


class FixedWindowThrottle(BaseThrottle):
    """A rate from ``ACTIVITY_THROTTLE_RATES[scope]``, counted per client in a fixed window."""

    scope = ""

    def scope_of(self, view: Any) -> str:
        return self.scope

    def ident(self, request: Request) -> str | None:
        """Who is counted: the user when signed in, else the client address; None: not throttled."""
        if request.user and request.user.is_authenticated:
            return rate_limits.user_ident(str(request.user.pk))
        return address_ident(request)

    def allow_request(self, request: Request, view: Any) -> bool:
        return self.admit(self.scope_of(view), self.ident(request))

    def admit(self, scope: str, ident: str | None) -> bool:
        """Count one request of ``ident`` in ``scope``, unless its window is full (then False)."""
        rate = rate_limits.rate_of(scope)
        if rate is None or ident is None:
            return True
        decision = rate_limits.hit(scope, ident, *rate)
        self._wait = decision.retry_after
        if decision.window is not None:
            tracking.record(decision.window)  # the count goes to Redis with the process's batches
        return decision.allowed

    def wait(self) -> float | None:
        return getattr(self, "_wait", None)


class AnonRateThrottle(FixedWindowThrottle):
    """Anonymous clients, by address."""

    scope = "anon"

    def ident(self, request: Request) -> str | None:
        if request.user and request.user.is_authenticated:
            return None
        return super().ident(request)


class UserRateThrottle(FixedWindowThrottle):
    """Signed-in users, by user."""

    scope = "user"

    def ident(self, request: Request) -> str | None:
        if not (request.user and request.user.is_authenticated):
            return None
        return super().ident(request)


class ScopedRateThrottle(FixedWindowThrottle):
    """The view's ``throttle_scope`` (``ingest``), by user or address."""

    def scope_of(self, view: Any) -> str:
        return getattr(view, "throttle_scope", "")


def count_unauthenticated(request: Request) -> None:
    """Count one request that ends unauthenticated (anonymous on a view that needs a user, or with
    credentials that failed) in the ``anon`` scope of its address; ``Throttled`` once that is full."""
    throttle = AnonRateThrottle()
    if not throttle.admit(throttle.scope, address_ident(request)):
        raise Throttled(throttle.wait())
