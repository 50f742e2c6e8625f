"""The key schema page's bytes a user (docs/hooks.py): generated from ``bench.capacity``'s results, and a
results file older than the key layout stops the site's build rather than leaving a family out."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="requirements-docs.txt (make docs installs it)")

HOOKS = Path(__file__).resolve().parent.parent / "docs" / "hooks.py"


@pytest.fixture
def hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", HOOKS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows_by_family(table: str) -> dict[str, list[str]]:
    """The key schema table's cells, by the family's pattern."""
    rows = [line.strip("|").split(" | ") for line in table.splitlines() if line.startswith("| `")]
    return {cells[0].strip(" `"): [cell.strip() for cell in cells] for cells in rows}


def test_each_family_the_bench_measured_shows_its_bytes_a_user_and_the_others_none(hooks):
    measured = json.loads(hooks.CAPACITY.read_text())["memory_by_family"]
    rows = rows_by_family(hooks.key_schema())
    assert set(measured) < set(rows)
    for pattern, cells in rows.items():
        expected = f"{measured[pattern]['bytes_per_user']:,.1f}" if pattern in measured else ""
        assert cells[3] == expected, pattern
    assert rows["{ses}:session:<user>"][3] == f"{measured['{ses}:session:<user>']['bytes_per_user']:,.1f}"


def test_a_results_file_naming_a_family_no_builder_declares_stops_the_build(hooks, tmp_path, monkeypatch):
    from mkdocs.exceptions import PluginError

    stale = json.loads(hooks.CAPACITY.read_text())
    stale["memory_by_family"]["{pv}:uv:<day>:<user>"] = {"keys": 1, "bytes": 72, "bytes_per_user": 0.1}
    path = tmp_path / "capacity.json"
    path.write_text(json.dumps(stale))
    monkeypatch.setattr(hooks, "CAPACITY", path)
    with pytest.raises(PluginError, match=r"\{pv\}:uv:<day>:<user>.*python -m bench\.capacity"):
        hooks.key_schema()
