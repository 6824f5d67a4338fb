"""The ``dsmon`` command line on the real z2 run (tests/data/z2, DeepSpeed 0.19.8)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from shared_fixtures import DATA, Z2

from cli import demo
from cli import main as cli
from dsmon.model import wire
from dsmon.model.records import Record
from dsmon.store.store import open_store


def run_cli(*argv: str) -> int:
    return cli.main(list(argv))


def test_parse_prints_one_json_line_per_record(
    capsys: pytest.CaptureFixture[str], z2_log_records: list[Record]
) -> None:
    assert run_cli("parse", str(Z2 / "train.log")) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == len(z2_log_records)
    decoded = [wire.decode(line) for line in lines]
    assert decoded == z2_log_records
    assert sum(1 for r in decoded if r.KIND == "timer") == 90
    first = json.loads(next(line for line in lines if '"kind":"timer"' in line))
    assert first["src"] == {
        "run": "z2",
        "file": "train.log",
        "line": 182,
        "offset": first["src"]["offset"],
        "node": None,
        "rank": 0,
        "sub": 0,
    }
    assert first["values_ms"] == {
        "optimizer_allgather": 11.76,
        "optimizer_gradients": 51.28,
        "optimizer_step": 77.51,
    }
    assert err.startswith(f"dsmon parse: 1 file(s), 366 lines, {len(z2_log_records)} records, ")


def test_parse_run_name_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("parse", "--run", "other", str(Z2 / "train.log")) == 0
    runs = {json.loads(line)["src"]["run"] for line in capsys.readouterr().out.splitlines()}
    assert runs == {"other"}


def test_parse_reads_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = (Z2 / "train.log").read_bytes()
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(data)))
    assert run_cli("parse", "-") == 0
    lines = capsys.readouterr().out.splitlines()
    timers = [json.loads(line) for line in lines if '"kind":"timer"' in line]
    assert len(timers) == 90
    assert timers[0]["src"]["file"] == "<stdin>"
    assert timers[0]["src"]["run"] == "stdin"


def test_parse_other_saved_output(capsys: pytest.CaptureFixture[str]) -> None:
    csv = DATA / "csv_tensorboard" / "csv_monitor" / "tiny_gpt_csv" / "Train_Samples_lr.csv"
    assert run_cli("parse", str(csv)) == 0
    points = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(points) == 25
    # first data row of Train_Samples_lr.csv: "8,0.0"
    assert (points[0]["kind"], points[0]["tag"], points[0]["samples"], points[0]["value"]) == (
        "monitor",
        "Train/Samples/lr",
        8,
        0.0,
    )
    assert points[0]["src"]["run"] == "tiny_gpt_csv"


@pytest.mark.parametrize(
    ("name", "reason"),
    [("missing.log", "No such file or directory"), ("folder", "Is a directory")],
)
def test_parse_unreadable_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, reason: str
) -> None:
    (tmp_path / "folder").mkdir()
    path = tmp_path / name
    assert run_cli("parse", str(path)) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"dsmon: cannot read {path}: {reason}\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_parse_permission_denied(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "secret.log"
    path.write_text("x\n")
    path.chmod(0)
    assert run_cli("parse", str(path)) == 1
    assert capsys.readouterr().err == f"dsmon: cannot read {path}: Permission denied\n"


def test_parse_reports_unparsed_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a real timer line cut in the middle of a value, as a killed run leaves it
    lines = (Z2 / "train.log").read_text().splitlines(keepends=True)
    cut = tmp_path / "cut.log"
    cut.write_text(
        "".join(lines[:183]) + "[Rank 0] time (ms) | fwd: 350.75 | bwd: 754.18 | bwd_inner: 6x\n"
    )
    assert run_cli("parse", str(cut)) == 0
    err = capsys.readouterr().err
    assert "unparsed timer: 1" in err
    assert "cut.log:184: time (ms) | fwd: 350.75 | bwd: 754.18 | bwd_inner: 6x" in err


def test_a_value_left_out_is_not_an_unparsed_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the real profile's root says its forward took "1.8 Gs" (57 years): that value is left
    # out of the record, and said so, while every line of the file was read
    log = str(DATA / "flops_detailed_stdout/train.log")
    assert run_cli("parse", log) == 0
    err = capsys.readouterr().err
    assert " 0 unparsed lines, 0 cut blocks, 1 values left out" in err.splitlines()[0]
    assert run_cli("import", "--store", str(tmp_path / "s.sqlite"), log) == 0
    head = capsys.readouterr().out.splitlines()[1]
    assert head.endswith("from 1 file(s); 1 values out of range left out"), head


def test_import_then_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "s.sqlite"
    assert run_cli("import", str(Z2), "--store", str(store)) == 0
    out = capsys.readouterr().out
    assert f"Store       {store}\n" in out
    assert "Run         z2\n" in out
    assert "Steps       30 (with timer breakdown: 30)\n" in out
    assert run_cli("import", str(Z2), "--store", str(store)) == 0
    assert " (0 new) from 2 file(s)" in capsys.readouterr().out
    with open_store(store) as s:
        (info,) = s.runs()
    assert (info.name, info.kinds["timer"]) == ("z2", 90)


def test_import_uses_dsmon_store_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DSMON_STORE", str(tmp_path / "env.sqlite"))
    assert run_cli("import", str(Z2 / "train.log"), "--run", "named") == 0
    with open_store(tmp_path / "env.sqlite") as s:
        assert [r.name for r in s.runs()] == ["named"]


def test_import_missing_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("import", str(tmp_path / "nope"), "--store", str(tmp_path / "s.sqlite")) == 1
    assert (
        capsys.readouterr().err
        == f"dsmon: cannot read {tmp_path / 'nope'}: No such file or directory\n"
    )


def test_import_folder_with_nothing_to_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    assert run_cli("import", str(tmp_path / "empty"), "--store", str(tmp_path / "s.sqlite")) == 1
    assert capsys.readouterr().err == f"dsmon: nothing to import in {tmp_path / 'empty'}\n"


def test_bad_store_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "no" / "such" / "dir.sqlite"
    assert run_cli("import", str(Z2), "--store", str(store)) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"dsmon: cannot open store {store}: ")
    assert err.count("\n") == 1


def test_demo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "demo.sqlite"
    assert run_cli("demo", "--store", str(store), "--summary-only") == 0
    out = capsys.readouterr().out
    assert "Run         demo\n" in out
    assert "Steps       30 (with timer breakdown: 30)\n" in out
    again = demo.load_demo(str(store))
    assert again.run == "demo"
    assert " (0 new) from 2 file(s)" in again.report


def test_demo_data_is_the_z2_run() -> None:
    for name in ("train.log", "ds_config.json", "NOTES.md"):
        assert (demo.demo_dir() / name).read_bytes() == (Z2 / name).read_bytes()


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli() == 2
    assert "usage: dsmon" in capsys.readouterr().err


def test_every_command_module_is_registered() -> None:
    """One module of cli/ per command, each in the parser: a new one cannot be forgotten."""
    import argparse

    helpers = {
        "__init__", "main", "errors", "extras", "supervise", "alerting", "ui_server", "ui_child"
    }  # fmt: skip
    modules = {p.stem for p in Path(cli.__file__).parent.glob("*.py")} - helpers
    (sub,) = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    runs = {name: parser.get_default("func") for name, parser in sub.choices.items()}
    assert {func.__module__.rpartition(".")[2] for func in runs.values()} == modules
    assert all(func.__name__ == "run" for func in runs.values())


@pytest.mark.slow  # starts a dsmon process
def test_console_script_runs(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "dsmon"
    if not exe.exists():
        pytest.skip("dsmon console script not installed in this environment")
    res = subprocess.run(
        [str(exe), "parse", str(tmp_path / "nope.log")], capture_output=True, text=True
    )
    assert res.returncode == 1
    assert res.stderr == f"dsmon: cannot read {tmp_path / 'nope.log'}: No such file or directory\n"


@pytest.mark.slow  # a real process
def test_building_the_command_line_loads_no_heavy_library() -> None:
    """Every command starts by building the parser: it must not load pandas, the health rules,
    Streamlit or a database driver (a collector on every node would carry them)."""
    code = (
        "import sys, cli.main as c; c.build_parser(); "
        "print(sorted(m for m in ('pandas', 'streamlit', 'plotly', 'pyarrow', 'psycopg', "
        "'uvicorn', 'starlette', 'tqdm', 'dsmon.health', 'dsmon.store') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
