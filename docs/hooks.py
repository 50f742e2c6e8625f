"""MkDocs hooks (``mkdocs.yml``: ``hooks``): the tables that must never drift are built from the code
and the benchmark results at build time, never pasted.

A page asks for one with an HTML comment, which the hook replaces:

- ``<!-- key-schema -->``: every key family of ``activity.store.families.FAMILIES``;
- ``<!-- settings -->``: every setting of ``activity.conf.SETTINGS``;
- ``<!-- constants -->``: the former settings that are named constants now (``CONSTANTS``), with
  their values;
- ``<!-- bench: NAME -->``: ``bench/results/NAME.md`` as the benchmark wrote it;
- ``<!-- include: PATH -->``: a file of the repository (the changelog);
- ``<!-- readme: HEADING -->``: the README's section of that heading (the steps the install test runs).

A marker naming a file or section that does not exist stops the build, as ``--strict`` stops on a
broken link. The app is imported with the example project's settings, read from the environment.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(
    r"<!-- (key-schema|settings|constants|bench: [\w-]+|bench-compare: [\w-]+ [\w-]+"
    r"|include: [\w./-]+|readme: [^>]+?) -->"
)
# The bytes a user of each key family, measured by `python -m bench.capacity`.
CAPACITY = ROOT / "bench" / "results" / "capacity.json"
# Images the benchmark pages show, served from bench/results/ under benchmarks/.
IMAGES = ("membership.png",)

# What each former ``ACTIVITY_*`` setting became: the constant, in the module that uses it.
CONSTANTS = (
    ("activity.services.tracking.BATCH_MS", "ACTIVITY_TRACK_BATCH_MS"),
    ("activity.services.tracking.BATCH_SIZE", "ACTIVITY_TRACK_BATCH_SIZE"),
    ("activity.services.tracking.BUFFER_MAX", "ACTIVITY_TRACK_BUFFER_MAX"),
    ("activity.services.tracking.FAIL_OPEN_BACKOFF", "ACTIVITY_FAIL_OPEN_BACKOFF"),
    ("activity.web.middleware.TRACK_METHODS", "ACTIVITY_TRACK_METHODS"),
    ("activity.web.middleware.TRACK_STATUSES", "ACTIVITY_TRACK_MIN_STATUS, ACTIVITY_TRACK_MAX_STATUS"),
    ("activity.web.middleware.PAGE_CONTENT_TYPES", "ACTIVITY_SESSION_CONTENT_TYPES"),
    ("activity.web.middleware.VISITOR_COOKIE_NAME", "ACTIVITY_VISITOR_COOKIE_NAME"),
    ("activity.web.middleware.VISITOR_COOKIE_AGE", "ACTIVITY_VISITOR_COOKIE_AGE"),
    ("activity.services.sessions.KEEP_QUERY", "ACTIVITY_SESSION_KEEP_QUERY"),
    ("activity.services.sessions.EXCLUDE_PATHS", "ACTIVITY_SESSION_EXCLUDE_PATHS"),
    ("activity.store.sessions.MAX_PATHS_PER_DAY", "ACTIVITY_PAGE_STATS_MAX_PATHS"),
    ("activity.store.sessions.MAX_NEXT_PAGES", "ACTIVITY_TRANSITIONS_MAX_NEXT"),
    ("activity.store.sessions.CANDIDATES", "ACTIVITY_REPORT_CANDIDATES"),
    ("activity.services.reports.TOP", "ACTIVITY_REPORT_TOP"),
    ("activity.services.reports.STALE_S", "ACTIVITY_REPORT_STALE"),
    ("activity.services.reports.WAIT_S", "ACTIVITY_REPORT_WAIT"),
    ("activity.services.reports.MERGE_SLICE", "ACTIVITY_REPORT_MERGE_SLICE"),
    ("activity.services.reports.MERGE_SLICES_PER_RUN", "ACTIVITY_REPORT_MERGE_SLICES_PER_RUN"),
    ("activity.store.keys.REPORT_READ_WINDOW", "ACTIVITY_REPORT_READ_WINDOW"),
    ("activity.schedule.REPORT_REFRESH_INTERVAL", "ACTIVITY_REPORT_REFRESH_INTERVAL"),
    ("activity.schedule.PRUNE_INTERVAL", "ACTIVITY_PRUNE_INTERVAL"),
    ("activity.schedule.SWEEP_INTERVAL", "ACTIVITY_SWEEP_INTERVAL"),
    ("activity.services.sweep.DEFAULT_TTL", "ACTIVITY_SWEEP_DEFAULT_TTL"),
    ("activity.services.flush.BATCH", "ACTIVITY_FLUSH_BATCH"),
    ("activity.services.locks.JOB_LOCK_TTL", "ACTIVITY_JOB_LOCK_TTL"),
    ("activity.services.privacy.TOMBSTONE_TTL", "ACTIVITY_ERASE_TOMBSTONE_TTL"),
    ("activity.services.groups.VIEW_TTL", "ACTIVITY_GROUP_VIEW_TTL"),
    ("activity.services.recommendations.WINDOW_DAYS", "ACTIVITY_RECOMMEND_DAYS"),
    ("activity.services.recommendations.RECENT_PAGES", "ACTIVITY_RECOMMEND_RECENT_PAGES"),
    ("activity.services.ingest.DAY_WRITES_CACHE", "ACTIVITY_DAY_WRITES_CACHE"),
    ("activity.store.audience.MAX_PEOPLE", "ACTIVITY_ACTIVE_BITMAP_MAX_ID"),
    ("activity.store.audience.PARTITION_BITS", "ACTIVITY_VISITOR_PARTITION_BITS"),
    ("activity.web.api.authentication.TOKEN_CACHE_TTL", "ACTIVITY_TOKEN_CACHE_TTL"),
    ("activity.web.api.serializers.MAX_PAGE_SIZE", "ACTIVITY_MAX_PAGE_SIZE"),
    ("activity.admin.dashboard.REFRESH_S", "ACTIVITY_DASHBOARD_REFRESH"),
    ("activity.admin.figures.DAYS", "ACTIVITY_DASHBOARD_DAYS"),
)

LIFETIMES = {
    "long-lived": "none: one of the few long-lived families; the sweep leaves it",
    "delete": "always written with one; the sweep deletes a key found without",
    "merged": "none (written by releases before generations); the sweep merges it into its generation",
}


def _django() -> None:
    """Import the app as the example project runs it (no Redis or database is touched)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()


def _cell(text: str) -> str:
    """Text for a Markdown table cell: reStructuredText's ``code`` as Markdown's, one line, pipes escaped."""
    text = re.sub(r"``(.+?)``", r"`\1`", " ".join(text.split()))
    return text.replace("|", "\\|")


def _duration(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    if days and rest % 3600 == 0:
        hours = f" {rest // 3600} h" if rest else ""
        return (f"{days} day" if days == 1 else f"{days} days") + hours
    return f"{seconds} s"


def key_schema() -> str:
    """One row per key family: pattern, Redis type, lifetime, bytes a user in ``bench.capacity``'s
    profile (``CAPACITY``), and the first paragraph of its builder's docstring. A family the profile
    measured that the code no longer has stops the build: the results file is then older than the
    layout, and the bench has to run again."""
    _django()
    from activity.store import families

    capacity = json.loads(_read(CAPACITY))
    measured = capacity["memory_by_family"]
    gone = sorted(set(measured) - {family.pattern for family in families.FAMILIES})
    if gone:
        raise PluginError(
            f"docs/hooks.py: {CAPACITY.name} measures families no key builder has ({gone}): "
            "run `python -m bench.capacity` again"
        )
    rows = ["| key (after `ACTIVITY_KEY_PREFIX`) | type | TTL | bytes a user | holds |", "|---|---|---|---:|---|"]
    for family in families.FAMILIES:
        kind = family.lifetime.kind
        if kind == "ttl":
            lifetime = f"fixed: {_duration(family.lifetime.stray_ttl({}, time.time()))} with the default settings"
        elif kind == "dated":
            lifetime = (
                f"until {family.lifetime.keep_days} days past the end of its day, week or month (read from the name)"
            )
        elif kind == "generation":
            lifetime = (
                f"until {family.lifetime.keep_days} days past the end of its generation of"
                f" {family.lifetime.generation_days} days (read from the name)"
            )
        else:
            lifetime = LIFETIMES[kind]
        doc = (family.builder.__doc__ or "").strip().split("\n\n", 1)[0] if family.builder else ""
        size = measured.get(family.pattern)
        per_user = "" if size is None else f"{size['bytes_per_user']:,.1f}"
        rows.append(f"| `{family.pattern}` | {family.redis_type} | {lifetime} | {per_user} | {_cell(doc)} |")
    total = sum(size["bytes_per_user"] for size in measured.values())
    return "\n".join(rows) + (
        f"\n\nBytes a user: `python -m bench.capacity`'s run of {capacity['when']} ({capacity['users']:,} users,"
        " each with one page view and one anonymous visit; `MEMORY USAGE` of every key of the family over the"
        f" users), {total:,.0f} in all: {capacity['bytes_per_user']:,.0f} of the users' structures and"
        f" {capacity['bytes_per_visitor']:,.0f} of the visitors'. Blank: a family that profile does not write."
    )


def settings_table() -> str:
    """One row per setting: name, default (as Python writes it), and why a site would change it."""
    _django()
    from activity import conf

    rows = ["| setting | default | minimum | why change it |", "|---|---|---|---|"]
    for setting in conf.SETTINGS:
        default = repr(setting.default).replace("|", "\\|")
        minimum = "" if setting.minimum is None else f"`{setting.minimum!r}`"
        rows.append(f"| `{setting.name}` | `{default}` | {minimum} | {_cell(setting.why)} |")
    return "\n".join(rows)


def constants_table() -> str:
    """One row per former setting that is a named constant now: the constant, its value, the setting it was."""
    _django()
    rows = ["| constant (in `activity`) | value | was the setting |", "|---|---|---|"]
    for dotted, former in CONSTANTS:
        module, _, name = dotted.rpartition(".")
        value = repr(getattr(importlib.import_module(module), name)).replace("|", "\\|")
        was = ", ".join(f"`{setting}`" for setting in former.split(", "))
        rows.append(f"| `{dotted.removeprefix('activity.')}` | `{value}` | {was} |")
    return "\n".join(rows)


def _escaped(markdown: str) -> str:
    """Text a benchmark wrote, made safe for Markdown: outside code spans, a ``<`` is shown rather
    than read as HTML (``/users/<u>/`` is not an underline) and a ``*`` is not emphasis."""
    parts = re.split(r"(`[^`\n]*`)", markdown)
    return "".join(part if i % 2 else part.replace("<", "&lt;").replace("*", "\\*") for i, part in enumerate(parts))


def _read(path: Path) -> str:
    if not path.is_file():
        raise PluginError(f"docs/hooks.py: {path.relative_to(ROOT)} does not exist")
    return path.read_text()


# The bench.http cases compared before and after a change, each against the floor it is judged by.
COMPARED = (
    ("page_anonymous", "vs_floor", "tracked page, anonymous visitor, vs the bare view"),
    ("page_signed_in", "vs_signed_in_floor", "tracked page, signed in, vs the bare signed-in view"),
    ("last_seen", "vs_floor", "GET last-seen, vs the bare view"),
    ("post_1", "vs_floor", "POST of 1 event, vs the bare view"),
    ("post_100", "vs_floor", "POST of 100 events, vs the bare view"),
    ("online", "vs_floor", "GET online (one page), vs the bare view"),
)


def http_comparison(before_name: str, after_name: str) -> str:
    """Two ``bench.http`` runs side by side: each case's ratio to its floor (measured within its own
    run), and the batches' events a second."""
    runs = [json.loads(_read(ROOT / "bench" / "results" / f"{name}.json")) for name in (before_name, after_name)]
    rows = ["| case | before | after | after / before |", "|---|---|---|---|"]
    for key, ratio, label in COMPARED:
        before, after = (run["cases"][key][ratio] for run in runs)
        rows.append(f"| {label} | {before:.2f}x | {after:.2f}x | {after / before:.3f} |")
    if all("post_100_views" in run["cases"] for run in runs):  # runs since bench.http posts page views
        before, after = (100 * run["cases"]["post_100_views"]["vs_floor"] for run in runs)
        label = "POST of 100 page views, events per bare-view request"
        rows.append(f"| {label} | {before:.2f} | {after:.2f} | {after / before:.3f} |")
    before, after = (run["cases"]["post_1000"]["events_per_s"] for run in runs)
    rows.append(f"| batches of 1,000 events, events/s | {before:,.0f} | {after:,.0f} | {after / before:.3f} |")
    dates = " and ".join(f"{run['when']} ({run['rounds']} rounds)" for run in runs)
    return "\n".join(rows) + f"\n\nRuns of {dates}: `bench/results/{before_name}.json`, `{after_name}.json`."


def readme_section(heading: str) -> str:
    """The README's ``## heading`` section, without its heading; its links into ``docs/`` made
    relative to the page that includes it (a page of ``docs/`` itself)."""
    readme = _read(ROOT / "README.md")
    start = f"\n## {heading}\n"
    if start not in readme:
        raise PluginError(f"docs/hooks.py: the README has no section '## {heading}'")
    return readme.split(start, 1)[1].split("\n## ", 1)[0].strip().replace("](docs/", "](")


def expand(marker: str) -> str:
    if marker == "key-schema":
        return key_schema()
    if marker == "settings":
        return settings_table()
    if marker == "constants":
        return constants_table()
    kind, _, argument = marker.partition(": ")
    if kind == "bench":
        return _escaped(_read(ROOT / "bench" / "results" / f"{argument}.md").strip())
    if kind == "bench-compare":
        return http_comparison(*argument.split())
    if kind == "include":
        return _read(ROOT / argument).strip()
    return readme_section(argument)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return MARKER.sub(lambda found: expand(found.group(1)), markdown)


def on_files(files: Files, config: Any) -> Files:
    for name in IMAGES:
        source = ROOT / "bench" / "results" / name
        files.append(File.generated(config, f"benchmarks/{name}", abs_src_path=str(source)))
    return files
