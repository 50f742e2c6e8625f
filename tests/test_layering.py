"""The house rules, read from the imports: entry points never reach into the store or redis-py,
the store never reaches up into the services, and no import runs in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("activity", "tasks")
ENTRY_POINTS = (
    "activity.api",
    "activity.middleware",
    "activity.admin",
    "activity.admin_site",
    "activity.dashboard",
    "activity.health",
    "activity.checks",
    "activity.tasks",
    "activity.management",
    "tasks",
)
# What the store may import from the rest of the app: settings, the calendar, the service's
# exceptions, the clock the calendar reads, and the counters it counts round trips into.
STORE_MAY_IMPORT = (
    "activity.store",
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


def test_entry_points_import_neither_the_store_nor_redis():
    offenders = {
        module: sorted(imp for imp in imports if within(imp, ("activity.store", "redis")))
        for module, imports in IMPORTS.items()
        if within(module, ENTRY_POINTS)
    }
    assert {module: found for module, found in offenders.items() if found} == {}


def test_only_the_store_imports_redis():
    offenders = {
        module: sorted(imp for imp in imports if within(imp, ("redis",)))
        for module, imports in IMPORTS.items()
        if not within(module, ("activity.store",))
    }
    assert {module: found for module, found in offenders.items() if found} == {}


def test_the_store_imports_no_service_module():
    offenders = {
        module: sorted(imp for imp in imports if within(imp, PACKAGES) and not within(imp, STORE_MAY_IMPORT))
        for module, imports in IMPORTS.items()
        if within(module, ("activity.store",))
    }
    assert {module: found for module, found in offenders.items() if found} == {}


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
