"""The floors of ``activity/`` are import-linter's contracts (``[tool.importlinter]`` in pyproject.toml,
run by ``make lint``). These tests hold the tool to them: the real tree keeps every contract, and a
copy of it with rogue modules added breaks them, the report naming each rogue."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports on ``tree`` with its pyproject.toml; it imports the packages from its working directory."""
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache", "--no-logo"], cwd=tree, capture_output=True, text=True, timeout=120
    )


def test_the_tree_keeps_every_contract():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


# What each rogue adds to the copy (appended to a file that exists), and the words of the report that
# name it.
ROGUES = {
    # The review's case: a new folder, on no floor, reaching into the store and the middleware.
    "a folder on no floor": (
        {
            "activity/reports_v2/__init__.py": "",
            "activity/reports_v2/build.py": "from activity.store import keys\nfrom activity.web import middleware\n",
        },
        "- activity.reports_v2",
    ),
    "a module on no floor": ({"activity/helpers.py": "from activity import conf\n"}, "- activity.helpers"),
    "the store importing a service": (
        {"activity/store/upward.py": "from activity.services import ingest\n"},
        "activity.store.upward -> activity.services.ingest",
    ),
    "a ground-floor module importing an entry point": (
        {"activity/schedule.py": "from activity.web import middleware\n"},
        "activity.schedule -> activity.web.middleware",
    ),
    "an entry point skipping the services": (
        {"activity/web/shortcut.py": "from activity.store import keys\n"},
        "activity.web.shortcut -> activity.store.keys",
    ),
    "a service importing redis-py": (
        {"activity/services/uses_redis.py": "import redis\n"},
        "activity.services.uses_redis -> redis",
    ),
    "the store importing a model": (
        {"activity/store/uses_model.py": "from activity.models import UserActivity\n"},
        "activity.store.uses_model -> activity.models",
    ),
    "the app importing the example project": (
        {"activity/services/uses_project.py": "from project import settings\n"},
        "activity.services.uses_project -> project",
    ),
    "the app importing the site's jobs": (
        {"activity/services/uses_jobs.py": "from jobs import reengagement\n"},
        "activity.services.uses_jobs -> jobs",
    ),
    # Reported as the import to remove to break the circle, whichever of the two that is.
    "an import circle inside a floor": (
        {
            "activity/services/circle_a.py": "from activity.services import circle_b\n",
            "activity/services/circle_b.py": "from activity.services import circle_a\n",
        },
        "-> .circle_",
    ),
}


def test_each_rogue_module_breaks_a_contract(tmp_path: Path):
    """All the rogues in one copy, one run: each contract reports every import that breaks it."""
    for package in ("activity", "jobs"):
        ignore = shutil.ignore_patterns("__pycache__", "static", "templates")
        shutil.copytree(ROOT / package, tmp_path / package, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for files, _ in ROGUES.values():
        for name, text in files.items():
            path = tmp_path / name
            path.parent.mkdir(exist_ok=True)
            path.write_text(path.read_text() + text if path.exists() else text)
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert [rogue for rogue, (_, named) in ROGUES.items() if named not in result.stdout] == [], result.stdout
