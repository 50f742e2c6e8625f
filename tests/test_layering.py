"""The house rules, read from the imports. ``activity/`` is built in floors, one folder each:

- the ground floor, the modules directly in ``activity/`` (settings, errors, events, calendar, models,
  ...), imports no floor above it;
- ``activity/store/`` is the only code that imports redis-py (or names keys, or runs Lua), and
  imports nothing above the ground floor;
- ``activity/services/`` calls the store and the ground floor, never an entry point;
- the entry points (``activity/web/``, ``activity/admin/``, the tasks, the management commands, the
  URLs, the checks, the app config, and the site's own ``tasks`` package) call the services and
  never the store or redis-py.

And no import runs in a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("activity", "tasks")
STORE = ("activity.store",)
SERVICES = ("activity.services",)
ENTRY_POINTS = (
    "activity.web",
    "activity.admin",
    "activity.tasks",
    "activity.management",
    "activity.urls",
    "activity.checks",
    "activity.apps",
    "tasks",
)
# What the store may import from the ground floor: settings, the calendar, the service's
# exceptions, the clock the calendar reads, and the counters it counts failures into.
STORE_MAY_IMPORT = (
    *STORE,
    "activity.conf",
    "activity.calendar",
    "activity.errors",
    "activity.clock",
    "activity.metrics",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = {
    module_name(path): path
    for package in PACKAGES
    for path in (ROOT / package).rglob("*.py")
    if "migrations" not in path.parts
}


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in the file (function-level imports included):
    ``from a import b`` counts as ``a.b`` when that is a module of ours, else as ``a``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            for alias in node.names:
                found.add(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in FILES else node.module)
    return found


IMPORTS = {module: imports_of(path) for module, path in FILES.items()}


def within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def offenders(floor: tuple[str, ...], forbidden: tuple[str, ...], allowed: tuple[str, ...] = ()) -> dict:
    """The modules of ``floor`` importing something under ``forbidden`` (``allowed`` excepted)."""
    found = {
        module: sorted(imp for imp in imports if within(imp, forbidden) and not within(imp, allowed))
        for module, imports in IMPORTS.items()
        if within(module, floor)
    }
    return {module: imports for module, imports in found.items() if imports}


GROUND = tuple(
    module for module in FILES if module.count(".") == 1 and not within(module, (*ENTRY_POINTS, *STORE, *SERVICES))
)


def test_the_floors_are_folders_and_every_module_is_on_one():
    assert set(GROUND) >= {
        "activity.conf",
        "activity.errors",
        "activity.events",
        "activity.calendar",
        "activity.models",
    }
    assert all(within(module, (*GROUND, *STORE, *SERVICES, *ENTRY_POINTS, "activity")) for module in FILES)


def test_entry_points_import_neither_the_store_nor_redis():
    assert offenders(ENTRY_POINTS, (*STORE, "redis")) == {}


def test_only_the_store_imports_redis():
    found = {module: imports for module, imports in IMPORTS.items() if any(within(imp, ("redis",)) for imp in imports)}
    assert found and all(within(module, STORE) for module in found)


def test_the_store_imports_nothing_above_the_ground_floor():
    assert offenders(STORE, PACKAGES, allowed=STORE_MAY_IMPORT) == {}


def test_services_import_no_entry_point():
    assert offenders(SERVICES, ENTRY_POINTS) == {}


def test_the_ground_floor_imports_no_floor_above_it():
    assert offenders(GROUND, (*STORE, *SERVICES, *ENTRY_POINTS)) == {}


def test_no_import_circles():
    edges = {module: {imp for imp in imports if imp in FILES} for module, imports in IMPORTS.items()}
    state: dict[str, str] = {}
    cycles: list[list[str]] = []

    def visit(module: str, trail: list[str]) -> None:
        state[module] = "open"
        for imported in sorted(edges.get(module, ())):
            if state.get(imported) == "open":
                cycles.append([*trail[trail.index(imported) :], imported])
            elif imported not in state:
                visit(imported, [*trail, imported])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert cycles == []
