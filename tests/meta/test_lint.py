"""ruff and mypy, as configured in pyproject.toml, are part of the test suite."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from locations import ROOT

#: Their own lane (``pytest -m lint``); slow too, so the fast lane leaves them out (mypy
#: without its cache takes over a minute on two cores).
pytestmark = [pytest.mark.lint, pytest.mark.slow]


def _tool(name: str) -> str:
    exe = Path(sys.executable).parent / name
    found = str(exe) if exe.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed: install the test extra (pip install -e '.[test]')")
    return found


def test_ruff_clean() -> None:
    res = subprocess.run([_tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy_clean() -> None:
    res = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
