"""Installs by role: pyproject.toml's dependency lists, and the one line a command prints
where its packages are not installed (tests/system/test_collector_install.py installs a node for real).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from locations import ROOT

from cli import extras
from cli import main as cli
from cli import parse as parse_cmd
from cli.errors import CommandError

Z2_LOG = ROOT / "tests" / "data" / "z2" / "train.log"
#: Distributions whose import name differs from their own.
IMPORT_NAMES = {"nvidia-ml-py": "pynvml"}


def names(requirements: list[str]) -> set[str]:
    """Import names of requirement strings (``psycopg[binary]>=3.1`` -> ``psycopg``)."""
    out = set()
    for req in requirements:
        dist = re.split(r"[\[<>=!~; ]", req, maxsplit=1)[0]
        out.add(IMPORT_NAMES.get(dist, dist.replace("-", "_")))
    return out


def project() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_the_base_install_is_a_nodes_and_all_adds_the_rest() -> None:
    base = names(project()["dependencies"])
    extra = {k: names(v) for k, v in project()["optional-dependencies"].items()}
    assert base == {"watchdog", "pynvml", "hjson", "orjson", "msgspec"}
    assert extra["collector"] <= base  # pip extras only add: the node's role adds nothing
    assert not base & extras.FULL_ONLY
    assert extra["all"] == extras.FULL_ONLY - {"numpy"}  # numpy comes with pandas
    assert set(extras.FULL_NEEDS) <= extra["all"]


def test_a_missing_package_is_one_line_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(extras, "missing", lambda modules: ["streamlit", "pandas"])
    with pytest.raises(CommandError) as err:
        extras.require_full("dashboard")
    assert str(err.value) == (
        "dashboard: needs streamlit, pandas, which a collector install leaves out: install "
        "dsmon's 'all' extra (pip install 'dsmon[all]', or '.[all]' in its checkout)"
    )
    assert cli.main(["import", str(Z2_LOG), "--store", str(tmp_path / "s.sqlite")]) == 1
    assert capsys.readouterr().err == f"dsmon: import: {str(err.value).partition(': ')[2]}\n"
    assert not (tmp_path / "s.sqlite").exists()  # refused before anything was started


def test_an_import_that_fails_anyway_is_the_same_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def needs_plotly(args: object) -> int:
        raise ModuleNotFoundError("No module named 'plotly'", name="plotly")

    monkeypatch.setattr(parse_cmd, "run", needs_plotly)
    assert cli.main(["parse", str(Z2_LOG)]) == 1
    assert capsys.readouterr().err == (
        "dsmon: parse: needs plotly, which a collector install leaves out: install dsmon's "
        "'all' extra (pip install 'dsmon[all]', or '.[all]' in its checkout)\n"
    )

    def broken(args: object) -> int:  # not a package of the full install: a real bug
        raise ModuleNotFoundError("No module named 'dsmon.nowhere'", name="dsmon.nowhere")

    monkeypatch.setattr(parse_cmd, "run", broken)
    with pytest.raises(ModuleNotFoundError):
        cli.main(["parse", str(Z2_LOG)])


#: Runs the command line in a process that cannot import the full install's packages.
HIDDEN = """
import sys
from importlib.abc import MetaPathFinder

class Hide(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {hidden!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Hide())
from cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def hidden_run(*argv: str) -> subprocess.CompletedProcess[str]:
    code = HIDDEN.format(hidden=set(extras.FULL_ONLY))
    return subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow  # starts a dsmon process
def test_without_the_full_packages_the_node_commands_run_and_the_others_say_so(
    tmp_path: Path,
) -> None:
    parsed = hidden_run("parse", str(Z2_LOG))
    assert parsed.returncode == 0, parsed.stderr
    assert parsed.stdout.count('"kind":"timer"') == 90
    assert hidden_run("collect", "--help").returncode == 0
    for argv in (
        ["dashboard", "--store", str(tmp_path / "s.sqlite")],
        ["serve", "--store", str(tmp_path / "s.sqlite")],
        ["import", str(Z2_LOG), "--store", str(tmp_path / "s.sqlite")],
        ["run", "--no-dashboard", "--", "true"],
    ):
        done = hidden_run(*argv)
        assert done.returncode == 1, (argv, done.stderr)
        assert re.fullmatch(
            rf"dsmon: {argv[0]}: needs [a-z_, ]+, which a collector install leaves out: "
            r"install dsmon's 'all' extra \(pip install 'dsmon\[all\]', or '\.\[all\]' in "
            r"its checkout\)\n",
            done.stderr,
        ), done.stderr
