"""MkDocs hooks (``mkdocs.yml``: ``hooks``): the tables that must never drift are built from the code
and the benchmark results at build time, never pasted.

A page asks for one with an HTML comment, which the hook replaces:

- ``<!-- key-schema -->``: every key family of ``activity.store.keys.FAMILIES``;
- ``<!-- settings -->``: every setting of ``activity.conf.SETTINGS``;
- ``<!-- bench: NAME -->``: ``bench/results/NAME.md`` as the benchmark wrote it;
- ``<!-- include: PATH -->``: a file of the repository (the changelog);
- ``<!-- readme: HEADING -->``: the README's section of that heading (the steps the install test runs).

A marker naming a file or section that does not exist stops the build, as ``--strict`` stops on a
broken link. The app is imported with the example project's settings, read from the environment.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"<!-- (key-schema|settings|bench: [\w-]+|include: [\w./-]+|readme: [^>]+?) -->")
# Images the benchmark pages show, served from bench/results/ under benchmarks/.
IMAGES = ("membership.png",)

LIFETIMES = {
    "long-lived": "none: one of the few long-lived families; the sweep leaves it",
    "delete": "always written with one; the sweep deletes a key found without",
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
    if seconds % 86400 == 0:
        days = seconds // 86400
        return f"{days} day" if days == 1 else f"{days} days"
    return f"{seconds} s"


def key_schema() -> str:
    """One row per key family: pattern, Redis type, lifetime, and the first paragraph of its builder's docstring."""
    _django()
    from activity.store import keys

    rows = ["| key (after `ACTIVITY_KEY_PREFIX`) | type | TTL | holds |", "|---|---|---|---|"]
    for family in keys.FAMILIES:
        kind = family.lifetime.kind
        if kind == "ttl":
            lifetime = f"fixed: {_duration(family.lifetime.stray_ttl({}, time.time()))} with the default settings"
        elif kind == "dated":
            lifetime = f"until {keys.KEEP_DAYS} days past the end of its day, week or month (read from the name)"
        else:
            lifetime = LIFETIMES[kind]
        doc = (family.builder.__doc__ or "").strip().split("\n\n", 1)[0] if family.builder else ""
        rows.append(f"| `{family.pattern}` | {family.redis_type} | {lifetime} | {_cell(doc)} |")
    return "\n".join(rows)


def settings_table() -> str:
    """One row per setting: name, default (as Python writes it), and why a site would change it."""
    _django()
    from activity import conf

    rows = ["| setting | default | why change it |", "|---|---|---|"]
    for setting in conf.SETTINGS:
        default = repr(setting.default).replace("|", "\\|")
        rows.append(f"| `{setting.name}` | `{default}` | {_cell(setting.why)} |")
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


def readme_section(heading: str) -> str:
    """The README's ``## heading`` section, without its heading."""
    readme = _read(ROOT / "README.md")
    start = f"\n## {heading}\n"
    if start not in readme:
        raise PluginError(f"docs/hooks.py: the README has no section '## {heading}'")
    return readme.split(start, 1)[1].split("\n## ", 1)[0].strip()


def expand(marker: str) -> str:
    if marker == "key-schema":
        return key_schema()
    if marker == "settings":
        return settings_table()
    kind, _, argument = marker.partition(": ")
    if kind == "bench":
        return _escaped(_read(ROOT / "bench" / "results" / f"{argument}.md").strip())
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
