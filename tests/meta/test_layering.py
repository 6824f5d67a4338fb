"""The import direction of the layers (CONTRIBUTING.md, "The layers").

dsmon/ is the core and imports neither collectors/, ui/, pages/, Streamlit, NVML nor
watchdog; collectors/ (the node side) never imports Streamlit, pandas, the server stack, a
database driver, ui/ or pages/; cli/ (the command line) is the top floor, which nothing imports;
ui/ is the one shared home of
the dashboard's Streamlit code (page frame, live fragment, charts): it imports dsmon/ and
Streamlit, never collectors/, pages/ or the store's drivers; pages/ and app.py import dsmon/ and
ui/, never collectors/, NVML, watchdog, a database driver or each other.

Inside dsmon/, each subpackage imports only those below it (:data:`DSMON_ALLOWED`, the graph
README's "Architecture" section draws), no module of dsmon/, collectors/, cli/ or ui/ imports
itself back through others (function-local and ``TYPE_CHECKING`` imports count: a circle hidden
in a function is still a circle), and the node collector loads neither the server stack nor the
dashboard nor pandas.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import pytest
from locations import ROOT

FORBIDDEN = {
    "dsmon": {"cli", "collectors", "ui", "pages", "app", "streamlit", "pynvml", "watchdog"},
    "collectors": {
        "cli", "ui", "pages", "app", "streamlit", "plotly", "pandas", "uvicorn", "starlette",
        "psycopg",
    },
    "ui": {"cli", "collectors", "pages", "app", "pynvml", "watchdog", "sqlite3", "psycopg"},
    "pages": {"cli", "collectors", "pynvml", "watchdog", "pages", "app", "sqlite3", "psycopg"},
    "app.py": {"cli", "collectors", "pynvml", "watchdog", "pages", "sqlite3", "psycopg"},
}  # fmt: skip


#: One worker runs every check of this module, so each source file is parsed once a run (the
#: full suite's grouping; the fast lane hands out its tests by work stealing, which keeps a
#: module's tests together on one worker unless that worker's share is taken over).
pytestmark = pytest.mark.xdist_group("layering")

#: The packages whose modules may not import each other in a circle.
CIRCLE_FREE = ("dsmon", "collectors", "cli", "ui")


@dataclass(frozen=True)
class Import:
    """One import statement: ``import a.b`` (``module`` None, ``names`` ("a.b",)) or
    ``from module import names`` (``level`` > 0 for a relative one; ``from . import x``,
    which names no module, is not kept)."""

    module: str | None
    level: int
    names: tuple[str, ...]


@functools.cache
def imports(path: Path) -> tuple[Import, ...]:
    """Every import statement of a source file, wherever it stands, read once a run.

    Only these are kept, not the syntax tree: the trees of every file held to the end of the
    run were most of the worker's live objects, walked by each of Python's full collections.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.append(Import(None, 0, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.ImportFrom) and node.module:  # not ``from . import x``
            found.append(Import(node.module, node.level, tuple(a.name for a in node.names)))
    return tuple(found)


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for imp in imports(path):
        if imp.module is None:
            roots.update(name.split(".")[0] for name in imp.names)
        elif imp.level == 0:
            roots.add(imp.module.split(".")[0])
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


# --- inside dsmon/: the subpackages, each importing only those below it --------------------

#: What each subpackage of dsmon/ may import of dsmon (itself included). README's
#: "Architecture" section draws the same graph.
DSMON_ALLOWED = {
    "model": {"model"},
    "parse": {"model", "parse"},
    "ds_config": {"model", "parse", "ds_config"},
    "store": {"model", "store"},
    "load": {"model", "parse", "store", "load"},
    "analysis": {"model", "ds_config", "store", "analysis"},
    "figures": {"model", "analysis", "figures"},
    "health": {"model", "ds_config", "parse", "store", "load", "analysis", "health"},
    "view": {"model", "store", "analysis", "health", "view"},
    "watch": {"model", "store", "health", "watch"},
    "serve": {"model", "store", "watch", "serve"},
}
#: Libraries a node's collector must never load: the server stack, the dashboard, pandas.
COLLECTOR_NEVER = ("uvicorn", "starlette", "streamlit", "psycopg", "pandas", "dsmon.health")


def project_imports(path: Path, roots: tuple[str, ...] = CIRCLE_FREE) -> set[str]:
    """Modules of ``roots`` a file imports anywhere in it: at module level, inside functions
    and under ``if TYPE_CHECKING:`` (``from dsmon.x import y`` counts ``dsmon.x.y`` too)."""
    out: set[str] = set()
    for imp in imports(path):
        if imp.module is None:
            out.update(name for name in imp.names if name.split(".")[0] in roots)
        elif imp.level == 0 and imp.module.split(".")[0] in roots:
            out.add(imp.module)
            out.update(f"{imp.module}.{name}" for name in imp.names)
    return out


def dsmon_imports(path: Path) -> set[str]:
    """Modules of dsmon a file imports, wherever the import stands."""
    return project_imports(path, ("dsmon",))


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def existing(name: str) -> str | None:
    """The module a dotted name refers to (an attribute import names its module)."""
    while name:
        path = ROOT / name.replace(".", "/")
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return name
        name = name.rpartition(".")[0]
    return None


def subpackage(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and (ROOT / "dsmon" / parts[1]).is_dir() else None


@pytest.mark.parametrize("package", sorted(DSMON_ALLOWED))
def test_dsmon_subpackages_import_only_below(package: str) -> None:
    bad: dict[str, list[str]] = {}
    for path in sorted((ROOT / "dsmon" / package).rglob("*.py")):
        above = {
            name
            for name in dsmon_imports(path)
            if (sub := subpackage(name)) is not None and sub not in DSMON_ALLOWED[package]
        }
        if above:
            bad[str(path.relative_to(ROOT))] = sorted(above)
    assert not bad, f"dsmon/{package}/ imports a subpackage above it: {bad}"


def test_every_dsmon_subpackage_has_a_rule() -> None:
    found = {p.name for p in (ROOT / "dsmon").iterdir() if (p / "__init__.py").is_file()}
    assert found == set(DSMON_ALLOWED), "new subpackage: give it a layer"


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of :data:`CIRCLE_FREE` it imports, wherever the import stands."""
    graph: dict[str, set[str]] = {}
    for package in CIRCLE_FREE:
        for path in (ROOT / package).rglob("*.py"):
            targets = {existing(n) for n in project_imports(path)}
            graph[module_name(path)] = {t for t in targets if t and t != module_name(path)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle (as a path that comes back to its start), found depth-first."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_no_import_cycle() -> None:
    graph = import_graph()
    # a package's __init__ importing its own modules is how packages work, not a cycle
    graph = {k: {t for t in v if not k.startswith(t + ".")} for k, v in graph.items()}
    assert cycles(graph) == []


def test_cycle_finder_finds_one() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]


@pytest.mark.slow  # a real process
def test_node_collector_loads_no_server_dashboard_or_pandas() -> None:
    """``dsmon collect`` runs on every training node: it must stay small."""
    import subprocess
    import sys

    code = (
        "import sys, collectors.agent, collectors.job, cli.main; cli.main.build_parser(); "
        f"print([m for m in {COLLECTOR_NEVER!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_readme_architecture_table_matches_the_rules() -> None:
    """README's table of subpackages says what each may import: the rules above, no more."""
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Architecture", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| [^|]+ \| ([^|]+) \|$", section, re.M)
    table = {name: {w.strip() for w in deps.split(",")} - {"-", ""} for name, deps in rows}
    rules = {k: v - {k} for k, v in DSMON_ALLOWED.items()}
    assert table == rules
