"""The import direction of the layers (DEVELOPERS.md, "How the code should look").

dsmon/ is the core and imports neither collectors/, ui/, pages/, Streamlit, NVML nor
watchdog; collectors/ never imports Streamlit, ui/ or pages/; ui/ is the one shared home of
the dashboard's Streamlit code (page frame, live fragment, charts): it imports dsmon/ and
Streamlit, never collectors/, pages/ or the store's drivers; pages/ and app.py import dsmon/ and
ui/, never collectors/, NVML, watchdog, a database driver or each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

FORBIDDEN = {
    "dsmon": {"collectors", "ui", "pages", "app", "streamlit", "pynvml", "watchdog"},
    "collectors": {"streamlit", "ui", "pages", "app"},
    "ui": {"collectors", "pages", "app", "pynvml", "watchdog", "sqlite3", "psycopg"},
    "pages": {"collectors", "pynvml", "watchdog", "pages", "app", "sqlite3", "psycopg"},
    "app.py": {"collectors", "pynvml", "watchdog", "pages", "sqlite3", "psycopg"},
}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def layer_files(layer: str) -> list[Path]:
    if layer.endswith(".py"):
        return [ROOT / layer]
    return sorted((ROOT / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_only_downwards(layer: str) -> None:
    files = layer_files(layer)
    if layer != "pages":
        assert files, f"{layer}/ has no Python files"
    bad = {str(f.relative_to(ROOT)): sorted(imported_roots(f) & FORBIDDEN[layer]) for f in files}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"{layer}/ imports a layer above it: {bad}"


def test_checker_detects_a_violation(tmp_path: Path) -> None:
    """The checker itself can fail: a file importing streamlit is caught."""
    f = tmp_path / "x.py"
    f.write_text("import streamlit as st\nfrom collectors.tail import x\nfrom ui import page\n")
    assert imported_roots(f) & FORBIDDEN["dsmon"] == {"streamlit", "collectors", "ui"}
