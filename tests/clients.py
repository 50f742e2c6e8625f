"""Django's and DRF's test clients as the suite uses them: each sends what a desktop browser sends as
its user agent unless a test gives its own (or a blank one), so requests are people's as on a real
site, not bots for lack of a user agent (docs/privacy.md). Through the clients' documented
``headers=`` argument."""

from __future__ import annotations

from typing import Any

import django.test
import rest_framework.test

BROWSER_AGENT = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"


class BrowserAgent:
    """Mixed into a test client or request factory: the browser's user agent by default; a
    ``User-Agent`` in ``headers`` or an ``HTTP_USER_AGENT`` default given here, or one given to a
    request, wins."""

    def __init__(self, *args: Any, headers: dict[str, str] | None = None, **defaults: Any) -> None:
        if "HTTP_USER_AGENT" not in defaults:
            headers = {"User-Agent": BROWSER_AGENT, **(headers or {})}
        super().__init__(*args, headers=headers, **defaults)


class Client(BrowserAgent, django.test.Client):
    """Django's test client, as a browser."""


class APIClient(BrowserAgent, rest_framework.test.APIClient):
    """DRF's test client, as a browser."""


class RequestFactory(BrowserAgent, django.test.RequestFactory):
    """Django's request factory, as a browser."""
