"""The README's two commands (CI runs the test one, the demo one has all its pieces), and docs cite real tests."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any

from locations import ROOT

from cli import demo
from cli import main as cli


def readme_commands() -> list[str]:
    """The lines of the README's first code block, which must open the README."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.match(r"# dsmon\n\n```(?:sh|bash)\n(.*?)\n```\n", text, re.DOTALL)
    assert m, "README.md must begin with its title and then the code block of commands"
    return m.group(1).splitlines()


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_readme_begins_with_exactly_two_commands() -> None:
    demo_cmd, test_cmd = readme_commands()
    # The full install (every role); a node's is pip install 'dsmon[collector]'.
    assert re.fullmatch(
        r"python3\.11 -m venv \.venv && \.venv/bin/pip install '\.\[all\]' && "
        r"\.venv/bin/dsmon demo",
        demo_cmd,
    )
    assert test_cmd.startswith("python3.11 -m venv .venv && ")
    assert "pip install -e '.[all,test]'" in test_cmd
    assert test_cmd.endswith(" && .venv/bin/pytest")


def test_ci_runs_the_readme_test_command() -> None:
    script = ROOT / ".ci" / "run"
    assert os.access(script, os.X_OK), ".ci/run must be executable"
    lines = script.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -euo pipefail" in lines  # a failing step fails CI
    commands = [ln for ln in lines[1:] if ln.strip() and not ln.startswith(("#", "set ", "cd "))]
    assert commands[-1] == readme_commands()[1]
    # before it, only system packages the tests drive, the services they need, and the
    # DeepSpeed training environment the end-to-end test runs a real job in
    allowed = ("apt-get ", "export ", "eval ", "trap ", "python3.11 -m venv .venv-deepspeed",
               ".venv-deepspeed/bin/pip install ")  # fmt: skip
    assert all(ln.startswith(allowed) for ln in commands[:-1]), commands[:-1]


def test_plain_pytest_runs_every_test_and_the_fast_lane_is_documented() -> None:
    """CI's ``pytest`` deselects nothing; ``-m "not slow"`` is the documented fast lane."""
    options = pyproject()["tool"]["pytest"]["ini_options"]
    assert "-m" not in options["addopts"].split() and "slow" not in options["addopts"]
    assert any(m.startswith("slow:") for m in options["markers"])
    assert '`.venv/bin/pytest -m "not slow"`' in (ROOT / "README.md").read_text(encoding="utf-8")


def test_console_script_and_demo_data_exist() -> None:
    project = pyproject()
    assert project["project"]["scripts"] == {"dsmon": "cli.main:main"}
    assert callable(cli.main)
    args = cli.build_parser().parse_args(["demo"])
    assert args.func is demo.run
    for name in ("train.log", "ds_config.json", "NOTES.md"):
        assert (ROOT / "dsmon" / "data" / "demo" / name).is_file()
    assert "data/**/*" in project["tool"]["setuptools"]["package-data"]["dsmon"]


def test_every_package_is_installed() -> None:
    """A plain ``pip install .`` ships every subpackage (a missing __init__.py drops one)."""
    find = pyproject()["tool"]["setuptools"]["packages"]["find"]
    assert "dsmon*" in find["include"]
    for folder in (ROOT / "dsmon").rglob("*"):
        if folder.is_dir() and folder.name != "__pycache__" and any(folder.glob("*.py")):
            assert (folder / "__init__.py").exists(), (
                f"{folder.relative_to(ROOT)} lacks __init__.py"
            )


def test_test_extra_has_the_tools_the_suite_runs() -> None:
    extra = " ".join(pyproject()["project"]["optional-dependencies"]["test"])
    for tool in ("pytest", "ruff", "mypy"):
        assert tool in extra


#: A test file named in prose: ``tests/test_x.py`` (or deeper, ``tests/sub/test_x.py``).
_TEST_PATH = re.compile(r"\btests/[\w./-]*?\.py\b")


def documents() -> list[Path]:
    """The README, the docs and every README of the tests' and benchmarks' data."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for folder in ("tests", "bench"):
        pages += sorted(p for p in (ROOT / folder).rglob("*.md") if p.name.lower() == "readme.md")
    return pages


def test_cited_test_files_exist() -> None:
    cited = {
        (page.relative_to(ROOT).as_posix(), path)
        for page in documents()
        for path in _TEST_PATH.findall(page.read_text(encoding="utf-8"))
    }
    assert any(page.startswith("tests/data/") for page, _ in cited)  # the scan reaches them
    assert [(page, path) for page, path in sorted(cited) if not (ROOT / path).is_file()] == []
