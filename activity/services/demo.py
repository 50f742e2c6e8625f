"""A month of believable traffic for a fresh install (``manage.py activity_demo``), so every figure,
chart and table of the dashboard and the API has something to show. The traffic goes the way a
site's requests go: each request an ``Activity`` handed to ``tracking.send``, as the middleware and
the API views hand theirs, with times spread over the past days; then the flush and the past days'
rollups run, as the beat jobs would, the groups' membership bitmaps are rebuilt (as
``activity_backfill`` does), and the cached reports and retention tables, which knew none of that
past, are rebuilt or dropped. Two funnels are defined from the first day on, and the traffic walks
through them. Redis is asked first: one that cannot serve leaves the database as it was.

The service's own rules decide what stays, as for any late event (docs/commands.md):

- page views older than ``ACTIVITY_PAGE_STATS_DAYS`` (8) days are not recorded, so the page-view
  chart starts there; active users and visitors are kept 35 days, more than the charts' 30;
- only views within ``ACTIVITY_SESSION_WINDOW`` of now join a session and make next pages, so the
  sessions and "where next" come from the users browsing in the last minute;
- bot and API-token requests count on the day they are recorded: today.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, timedelta

from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Group
from django.dispatch import Signal

from activity import calendar, clock, conf
from activity.events import Event, clean_user
from activity.models import Funnel
from activity.services import audience, cohorts, flush, groups, health, locks, reports, tracking, traffic
from activity.services.tracking import Activity

MAX_USERS = 5000
MAX_DAYS = 30  # the dashboard's charts; Redis keeps a day's audience figures 35 days
USERNAME_PREFIX = "demo."
FIRST_NAMES = ("ada", "alan", "barbara", "claude", "dennis", "donald", "edsger", "frances", "grace", "guido")
LAST_NAMES = ("hopper", "kay", "knuth", "lamport", "liskov", "lovelace", "ritchie", "shannon", "turing", "wirth")
GROUPS = (("Demo editors", 0.05), ("Demo beta testers", 0.2), ("Demo customers", 0.5))  # (name, share of users)
TOKEN_USERS = 2  # the first demo users get an API token and call the API today, as integrations do
# Users' habits: (chance of a visit on a weekday, how many users have it): daily, regular, occasional.
HABITS = ((0.7, 1), (0.3, 3), (0.07, 6))
WEEKEND = 0.5  # a weekend day's visits, relative to a weekday's
GROWTH = 0.3  # the month's first day has this much fewer visits than today: a site that grows
VISITORS_PER_USER = 2  # anonymous browsers, per user
VISITOR_CHANCE = 0.08  # an anonymous browser's chance of a visit on a day
LIVE_SHARE = 0.1  # users browsing in the last minute
BOT_REQUESTS_PER_USER = 0.5  # crawler requests today
API_CALLS = (5, 40)  # calls a token's integration makes today
# The demo site: each page's links, the likeliest next first, and the pages visits start from.
SITE: dict[str, tuple[str, ...]] = {
    "/": ("/features/", "/pricing/", "/blog/", "/docs/", "/signup/"),
    "/features/": ("/pricing/", "/docs/", "/signup/", "/"),
    "/pricing/": ("/signup/", "/features/", "/docs/faq/", "/"),
    "/signup/": ("/account/", "/docs/getting-started/"),
    "/docs/": ("/docs/getting-started/", "/docs/api/", "/docs/faq/"),
    "/docs/getting-started/": ("/docs/api/", "/docs/faq/", "/account/"),
    "/docs/api/": ("/docs/getting-started/", "/account/tokens/", "/docs/"),
    "/docs/faq/": ("/pricing/", "/docs/", "/"),
    "/blog/": ("/blog/launch/", "/blog/redis-tips/", "/"),
    "/blog/launch/": ("/features/", "/blog/", "/pricing/"),
    "/blog/redis-tips/": ("/docs/", "/blog/"),
    "/account/": ("/projects/", "/account/tokens/", "/docs/"),
    "/account/tokens/": ("/docs/api/", "/account/"),
    "/projects/": ("/projects/reports/", "/account/", "/docs/api/"),
    "/projects/reports/": ("/projects/", "/docs/"),
}
ENTRY_PAGES = ("/", "/", "/projects/", "/blog/", "/docs/", "/pricing/")
# The funnels the demo defines, counting from its first day: (name, steps, window, mode).
FUNNELS = (
    ("Sign-up", ["/pricing/", "/signup/", "/account/"], 3600, "sequential"),
    ("Docs to the API", ["/docs/", "/docs/getting-started/", "/docs/api/"], 1800, "strict"),
)
BOT_AGENTS = (
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
    "Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)",
    "UptimeRobot/2.0 (http://www.uptimerobot.com/)",
    "curl/8.5.0",
)

# Sent once a day's traffic is recorded, with ``day``: the management command's progress.
day_sent = Signal()


@dataclass(frozen=True, slots=True)
class Account:
    pk: object  # the user's primary key
    user: str  # the id its events carry: the primary key as a string, as the middleware sends it
    name: str  # its username


@dataclass(frozen=True, slots=True)
class Demo:
    users: int
    new_users: int
    groups: int
    tokens: list[str]  # usernames of the users given an API token
    first_day: date
    days: int
    page_views: int  # signed-in requests that were page views, sent (the service keeps the recent ones)
    visits: int  # anonymous browsers' requests
    bots: int
    api_calls: int
    browsing: int  # users in a live session now
    flushed: int  # last-seen rows written to the database (0 when a scheduled flush was running)
    rolled_up: int  # past days with a rollup row written
    memberships: int  # group memberships with a bit in the groups' bitmaps (every group's, rebuilt)
    funnels: int  # the demo's funnels defined by this run (a rerun finds them)


def username(n: int) -> str:
    """The ``n``-th demo username (from 0): the same on every run, so a rerun reuses the users."""
    first, last = FIRST_NAMES[n % len(FIRST_NAMES)], LAST_NAMES[n // len(FIRST_NAMES) % len(LAST_NAMES)]
    cycle = n // (len(FIRST_NAMES) * len(LAST_NAMES))
    return f"{USERNAME_PREFIX}{first}.{last}{cycle or ''}"


def ensure_users(count: int) -> tuple[list[Account], int]:
    """The first ``count`` demo users, created where missing (without a usable password: nobody
    signs in as them); returns them in order and how many were created."""
    model = get_user_model()
    field = model.USERNAME_FIELD
    names = [username(n) for n in range(count)]
    demo_users = model._default_manager.filter(**{f"{field}__startswith": USERNAME_PREFIX})
    existing = set(demo_users.values_list(field, flat=True))
    missing = [name for name in names if name not in existing]
    model._default_manager.bulk_create(model(**{field: name, "password": make_password(None)}) for name in missing)
    pks = dict(demo_users.values_list(field, "pk"))
    return [Account(pks[name], clean_user(str(pks[name])), name) for name in names], len(missing)


def ensure_groups(accounts: Sequence[Account], seed: int) -> int:
    """The demo groups, each given its share of the users (added to, never emptied); returns how many."""
    rng = random.Random(f"{seed}:groups")
    for name, share in GROUPS:
        group, _ = Group.objects.get_or_create(name=name)
        size = min(len(accounts), max(2, round(len(accounts) * share)))
        group.user_set.add(*(account.pk for account in rng.sample(accounts, size)))
    return len(GROUPS)


def ensure_tokens(accounts: Sequence[Account]) -> list[str]:
    """An API token (DRF's authtoken) for each of ``accounts``; none where the site lacks the app."""
    if not apps.is_installed("rest_framework.authtoken"):
        return []
    from rest_framework.authtoken.models import Token  # importable only with the app installed

    for account in accounts:
        Token.objects.get_or_create(user_id=account.pk)
    return [account.name for account in accounts]


def _next_page(rng: random.Random, path: str) -> str:
    links = SITE[path]
    return rng.choices(links, weights=[1 / (1 + rank) for rank in range(len(links))])[0]


def _visit(rng: random.Random, start: float, end: float) -> list[tuple[float, str]]:
    """A visit's page views as (ts, path): from an entry page along the links, 5 to 90 s apart,
    beginning in [start, end), most often in its afternoon."""
    ts = start + rng.triangular(0.25, 0.97, 0.6) * (end - start)
    path, views = rng.choice(ENTRY_PAGES), []
    for _ in range(1 + min(int(rng.expovariate(1 / 2.5)), 11)):
        if ts >= end:
            break
        views.append((round(ts, 3), path))
        path, ts = _next_page(rng, path), ts + rng.uniform(5, 90)
    return views


def _habits(accounts: Sequence[Account], seed: int) -> list[float]:
    """Each user's chance of a visit on a weekday."""
    rng = random.Random(f"{seed}:habits")
    chances, weights = zip(*HABITS, strict=True)
    return rng.choices(chances, weights=weights, k=len(accounts))


def past(accounts: Sequence[Account], days: int, seed: int, now: float) -> Iterator[tuple[date, list[Activity]]]:
    """Each day's requests, oldest day first, ending with today's until a session window before
    ``now`` (the live minute is ``live``'s): the same for the same arguments, and a day's the same
    whatever ``days``."""
    chances = _habits(accounts, seed)
    draw = random.Random(f"{seed}:visitors")
    visitors = [f"{draw.getrandbits(128):032x}" for _ in range(len(accounts) * VISITORS_PER_USER)]
    today = calendar.day_of(now)
    for back in range(days - 1, -1, -1):
        rng, day = random.Random(f"{seed}:day:{back}"), today - timedelta(days=back)
        start = calendar.midnight(day).timestamp()
        end = start + 86400 if back else now - conf.settings.SESSION_WINDOW
        busy = (1 - GROWTH * back / MAX_DAYS) * (WEEKEND if day.weekday() >= 5 else 1)
        entries: list[Activity] = []
        for account, chance in zip(accounts, chances, strict=True):
            if rng.random() < chance * busy:
                entries += [
                    Activity(traffic.PERSON, event=Event(account.user, ts, path), name=account.name)
                    for ts, path in _visit(rng, start, end)
                ]
        for visitor in visitors:
            if rng.random() < VISITOR_CHANCE * busy:
                entries += [
                    Activity(traffic.PERSON, visitor=(visitor, ts), path=path) for ts, path in _visit(rng, start, end)
                ]
        yield day, entries


def live(accounts: Sequence[Account], tokens: int, seed: int, now: float) -> list[Activity]:
    """The last minute's requests: users browsing (sessions with next pages, each view within the
    session window of ``now``), crawlers, and the first ``tokens`` users' API calls of today."""
    rng = random.Random(f"{seed}:live")
    span = conf.settings.SESSION_WINDOW * 0.75  # every view of a session joins it, however long sending takes
    views: list[tuple[float, Account, str]] = []
    for account in rng.sample(accounts, min(len(accounts), max(3, round(len(accounts) * LIVE_SHARE)))):
        pages, start = rng.randint(3, 6), now - span * rng.uniform(0.5, 1)
        path = rng.choice(ENTRY_PAGES)
        for n in range(pages):
            views.append((round(start + (now - start) * n / pages, 3), account, path))
            path = _next_page(rng, path)
    views.sort(key=lambda view: view[0])  # the order the requests arrive in
    entries = [
        Activity(traffic.PERSON, event=Event(account.user, ts, path), name=account.name) for ts, account, path in views
    ]
    for account in accounts[:tokens]:
        since = max(calendar.midnight(calendar.day_of(now)).timestamp(), now - 3600)
        calls = sorted(rng.uniform(since, now) for _ in range(rng.randint(*API_CALLS)))
        entries += [
            Activity(traffic.MACHINE, event=Event(account.user, round(ts, 3)), name=account.name) for ts in calls
        ]
    for _ in range(max(3, round(len(accounts) * BOT_REQUESTS_PER_USER * rng.uniform(0.8, 1.2)))):
        if traffic.is_bot(rng.choice(BOT_AGENTS)):  # as the middleware tells them
            entries.append(Activity(traffic.BOT))
    return entries


def ensure_funnels(first_day: date) -> int:
    """Define the demo's funnels, counting from ``first_day`` (so the past days' traffic goes through
    them); returns how many were new."""
    start = calendar.midnight(first_day)
    made = 0
    for name, steps, window, mode in FUNNELS:
        _, created = Funnel.objects.get_or_create(
            name=name, defaults={"steps": steps, "window": window, "mode": mode, "created": start}
        )
        made += created
    return made


def _kind(entry: Activity) -> str:
    """What ``Demo`` counts ``entry`` as: a page view, an anonymous visit, a bot's or an API call."""
    if entry.visitor is not None:
        return "visits"
    return {traffic.PERSON: "page_views", traffic.BOT: "bots", traffic.MACHINE: "api_calls"}[entry.kind]


def _send(entries: Sequence[Activity], tally: Counter[str]) -> None:
    """Record ``entries`` in batches as the middleware's, and count them."""
    for start in range(0, len(entries), tracking.BATCH_SIZE):
        tracking.send(list(entries[start : start + tracking.BATCH_SIZE]))
    tally.update(map(_kind, entries))


def _flush() -> int:
    """The flush now, as its beat job runs it; 0 when a scheduled run holds the lock (it writes them)."""
    with locks.exclusive_job("flush") as acquired:
        return flush.flush().flushed if acquired else 0


def _refresh_cached_copies() -> None:
    """Rebuild the reports' current copies and drop the retention tables: built before the demo's
    past days were sent, they would be served as they are until their TTL."""
    for name, _ in reports.catalogue():
        for period in reports.REPORT_PERIODS:
            reports.rebuild(name, period)
    cohorts.drop_tables()


def fill(users: int, days: int, seed: int) -> Demo:
    """Create ``users`` demo users, their groups and two tokens, send ``days`` days of traffic
    (today included), run the flush and the past days' rollups, rebuild the groups' membership
    bitmaps and refresh the cached copies. Raises ``StoreUnavailable`` before writing anything when
    Redis cannot serve. Not idempotent, as no replay of traffic is: a rerun reuses the users and
    adds its page views to the first run's."""
    health.require_redis()
    accounts, created = ensure_users(users)
    group_count = ensure_groups(accounts, seed)
    # The bits of a rerun's members too, whose membership rows (and signals) came with a run that
    # may have found Redis away.
    memberships = groups.rebuild_memberships()
    tokens = ensure_tokens(accounts[:TOKEN_USERS])
    made = ensure_funnels(calendar.day_of(clock.now()) - timedelta(days=days - 1))
    tally: Counter[str] = Counter()
    for day, entries in past(accounts, days, seed, clock.now()):
        _send(entries, tally)
        day_sent.send(sender=fill, day=day)
    now = clock.now()
    latest = live(accounts, len(tokens), seed, now)
    _send(latest, tally)
    flushed = _flush()
    today = calendar.day_of(now)
    first = today - timedelta(days=days - 1)
    rolled = audience.rollup_days(first, today - timedelta(days=1)) if days > 1 else []
    rows = [audience.rollup_day(day) for day in rolled]
    _refresh_cached_copies()
    return Demo(
        users=len(accounts),
        new_users=created,
        groups=group_count,
        tokens=tokens,
        first_day=first,
        days=days,
        browsing=len({entry.event.user for entry in latest if entry.kind == traffic.PERSON and entry.event}),
        flushed=flushed,
        rolled_up=sum(row is not None for row in rows),
        memberships=memberships.bits,
        funnels=made,
        page_views=tally["page_views"],
        visits=tally["visits"],
        bots=tally["bots"],
        api_calls=tally["api_calls"],
    )
