"""The command line says success only where something happened (issue 41, case 9).

A command that read nothing says so and exits non-zero; a failed command leaves no file
behind; an error is the first and the last thing printed; a mistyped flag gets the command's
own usage and the flag it was most likely meant to be.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from shared_fixtures import Z2

from cli import main as cli

NOT_DS = "hello: this is the output of some other program\nloss went down\n"


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test runs in an empty folder (where ./dsmon.sqlite would be made), $DSMON_STORE unset."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DSMON_STORE", raising=False)
    return tmp_path


def files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


@pytest.mark.parametrize("command", ["import", "parse"])
def test_input_that_is_not_deepspeed_output_exits_1_with_a_hint(
    command: str, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (in_tmp / "notds.log").write_text(NOT_DS)
    assert cli.main([command, "notds.log"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"dsmon: {command}: no DeepSpeed output in notds.log (2 line(s) read")
    assert '"wall_clock_breakdown": true' in err and err.count("\n") == 1
    assert files(in_tmp) == {"notds.log"}  # no ./dsmon.sqlite left behind


def test_a_missing_input_leaves_no_store_behind(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["import", "/nonexistent"]) == 1
    assert capsys.readouterr().err == "dsmon: cannot read /nonexistent: No such file or directory\n"
    assert files(in_tmp) == set()


def test_a_store_that_was_there_is_kept_when_an_import_reads_nothing(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["import", str(Z2 / "train.log"), "--store", "s.sqlite"]) == 0
    (in_tmp / "notds.log").write_text(NOT_DS)
    assert cli.main(["import", "notds.log", "--store", "s.sqlite"]) == 1
    assert "s.sqlite" in files(in_tmp)


def test_check_of_a_store_that_is_not_there_creates_none(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["check", "--store", "nosuch.sqlite", "--run", "x"]) == 2
    assert capsys.readouterr().err == (
        "dsmon: cannot read nosuch.sqlite: no store at nosuch.sqlite\n"
    )
    assert files(in_tmp) == set()


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["dashboard", "--no-browser", "--port", "{port}"], "--port"),
        (["dashboard", "--no-browser", "--no-ingest", "--port", "{port}"], "--port"),
        (["dashboard", "--no-browser", "--port", "0", "--ingest-port", "{port}"], "--ingest-port"),
        (["watch", "train.log", "--no-browser", "--port", "{port}"], "--port"),
        (["demo", "--no-browser", "--port", "{port}"], "--port"),
    ],
)
def test_a_port_in_use_is_the_first_and_last_thing_said(
    argv: list[str],
    flag: str,
    taken_port: int,
    in_tmp: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = [a.format(port=taken_port) for a in argv]
    if args[0] == "dashboard" and "--port" in args and args[args.index("--port") + 1] == "0":
        args[args.index("--port") + 1] = str(taken_port + 1 if taken_port < 65535 else 1024)
    assert cli.main(args) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"dsmon: {args[0]}: {flag} {taken_port}: cannot listen on 127.0.0.1:{taken_port} "
        f"(in use); stop what uses it, or give another {flag}\n"
    )
    assert files(in_tmp) == set()  # nothing started, no store made


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["dashboard", "--no-browser", "--port", "{port}", "--ingest-port", "70000"],
            "dashboard: --ingest-port 70000: not a TCP port (1-65535)",
        ),
        (  # the ingest API's default port: dsmon's own server would hold it
            ["dashboard", "--no-browser", "--port", "8502"],
            "dashboard: --port 8502: --ingest-port is 8502 too; one port cannot serve both "
            "servers, give one of them another",
        ),
        (
            ["watch", "train.log", "--port", "{port}", "--ingest-port", "{port}"],
            "watch: --port {port}: --ingest-port is {port} too; one port cannot serve both "
            "servers, give one of them another",
        ),
        (
            ["watch", "train.log", "--port", "{port}", "--alert-webhook", "ftp://h.example/x"],
            "watch: alert webhook ftp://h.example/...: not an http(s) URL",
        ),
    ],
)
def test_a_bad_option_is_named_before_a_port_in_use(
    argv: list[str], said: str, taken_port: int, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo is the user's whatever else runs here: it is said, not the busy port."""
    assert cli.main([a.format(port=taken_port) for a in argv]) == 1
    assert capsys.readouterr() == ("", f"dsmon: {said.format(port=taken_port)}\n")
    assert files(in_tmp) == set()


@pytest.mark.parametrize(
    ("argv", "usage", "hint"),
    [
        (["check", "x.json", "--jsn"], "usage: dsmon check", "--jsn (did you mean --json?)"),
        (
            ["import", "x", "--sotre", "s"],
            "usage: dsmon import",
            "--sotre s (did you mean --store?)",
        ),
        (["parse", "x", "--runn", "r"], "usage: dsmon parse", "--runn r (did you mean --run?)"),
        (["--verison"], "usage: dsmon [-h]", "--verison (did you mean --version?)"),
        (["import", "x", "--zzz"], "usage: dsmon import", "unrecognized arguments: --zzz\n"),
    ],
)
def test_a_mistyped_flag_gets_the_commands_usage_and_a_suggestion(
    argv: list[str], usage: str, hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage)
    assert hint in err
