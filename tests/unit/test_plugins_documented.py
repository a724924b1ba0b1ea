"""The table of extension points in ARCHITECTURE.md ("The runtime") names, for each point, exactly the capability
modules that implement it: a newcomer reads where a capability lives from it, so it must not drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

from gpu_scheduler.runtime import framework, plugins

ARCHITECTURE = Path(__file__).resolve().parents[2] / "ARCHITECTURE.md"


def documented() -> dict[str, set[str]]:
    """point -> the plugin modules the table names for it (each row's first cell may name several points)."""
    table: dict[str, set[str]] = {}
    for line in ARCHITECTURE.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        points = re.findall(r"`([a-z_]+)`", cells[0]) if line.startswith("| `") else []
        if not points or len(cells) != 4:
            continue
        named = {word for word in re.findall(r"(?:^|, )([a-z]+)", re.sub(r"\([^)]*\)", "", cells[3]))}
        for point in points:
            table[point] = named
    return table


def implemented() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    points = [name for name, value in vars(framework.Plugin).items() if not name.startswith("_") and callable(value)]
    for kind in {*plugins.ALL, *plugins.EXTENDER}:
        module = kind.__module__.rsplit(".", 1)[-1]
        for point in points:
            if getattr(kind, point) is not getattr(framework.Plugin, point):
                found.setdefault(point, set()).add(module)
    return found


def test_the_architecture_table_names_every_plugin_at_every_point_it_implements():
    table, code = documented(), implemented()
    assert set(code) <= set(table), f"points implemented but missing from the table: {set(code) - set(table)}"
    for point in set(table) & set(vars(framework.Plugin)):
        modules = code.get(point, set())
        assert table[point] == modules, f"{point}: the table says {sorted(table[point])}, the code {sorted(modules)}"
