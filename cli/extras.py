"""Installs by role: what a node's install leaves out, and the one line that says so.

``pip install dsmon`` (or ``'dsmon[collector]'``) installs what a training node needs for
``dsmon collect``, ``dsmon run --server`` and ``dsmon probe``: the parsers, the record codec,
the tailer, NVML and the sender. ``pip install 'dsmon[all]'`` adds the dashboard, the ingest
server, the store's frames and the analyses. A command that needs the full set checks for it
before it starts anything (:func:`require_full`), and an import of one of those packages that
fails anyway is turned into the same line by :func:`cli.main.main`
(:func:`missing_package_line`): a user never sees a traceback for a role they did not install.
"""

from __future__ import annotations

import importlib.util

from cli.errors import CommandError

#: The extra that installs every role (the README's first command).
FULL_EXTRA = "all"
#: Top-level modules of the packages only the full install has (``pyproject.toml``'s ``all``).
FULL_ONLY = frozenset(
    {
        "streamlit",
        "plotly",
        "pandas",
        "numpy",
        "pyarrow",
        "tsdownsample",
        "uvicorn",
        "starlette",
        "prometheus_client",
        "psycopg",
        "tqdm",
        "polars",
    }
)
#: What a command that stores, serves or shows runs imports (psycopg only for PostgreSQL).
FULL_NEEDS = (
    "streamlit",
    "plotly",
    "pandas",
    "pyarrow",
    "tsdownsample",
    "uvicorn",
    "starlette",
    "prometheus_client",
    "tqdm",
)


def missing(modules: tuple[str, ...]) -> list[str]:
    """The modules of ``modules`` this environment cannot import (looked up, not imported)."""
    out = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(name)
    return out


def install_line(command: str, modules: list[str]) -> str:
    """What a command says when ``modules`` are not installed: the extra that brings them."""
    return (
        f"{command}: needs {', '.join(modules)}, which a collector install leaves out: install "
        f"dsmon's '{FULL_EXTRA}' extra (pip install 'dsmon[{FULL_EXTRA}]', or "
        f"'.[{FULL_EXTRA}]' in its checkout)"
    )


def require_full(command: str) -> None:
    """Refuse to start ``command`` where the full install's packages are missing.

    Raises:
        CommandError: with :func:`install_line`, before anything is started.
    """
    absent = missing(FULL_NEEDS)
    if absent:
        raise CommandError(install_line(command, absent))


def missing_package_line(command: str, exc: ModuleNotFoundError) -> str | None:
    """The install line for an import that failed on a full-install package; else None."""
    root = (exc.name or "").split(".")[0]
    return install_line(command, [root]) if root in FULL_ONLY else None
