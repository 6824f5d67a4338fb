"""A training node's install: ``pip install '.[collector]'`` in a fresh venv, and nothing more.

This checkout (as it is, committed or not: the files ``pip install .`` reads) is installed
with the ``collector`` extra into a new virtualenv. That venv must not be able to import
Streamlit, pandas, plotly, psycopg or uvicorn, and yet run, as real processes against a real
``dsmon serve`` started from the full install running the tests:

- ``dsmon collect`` on a real DeepSpeed log (tests/data/z2, DeepSpeed 0.19.8): the store ends
  up with exactly what a live read of the log gives;
- ``dsmon run --server URL -- python tiny.py``: the job (which prints that log) runs with the
  probe, the command exits with its status, and its records arrive;
- ``dsmon dashboard``, which needs the full install, says so in one line.

Slow: a real ``pip install`` into a new venv.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from locations import ROOT

from dsmon.model.records import Record
from dsmon.model.wire import encode
from dsmon.parse.log import LogParser
from dsmon.serve.tokens import write_token_file
from dsmon.store.store import open_store

pytestmark = pytest.mark.slow

Z2_LOG = ROOT / "tests" / "data" / "z2" / "train.log"
TOKEN = "node-install-token-0123456789"
#: What ``pip install .`` reads (.dockerignore's allow-list says the same).
SOURCES = ("pyproject.toml", "README.md", "app.py", "pages", ".streamlit", "dsmon", "collectors")
SOURCES += ("cli", "ui")
#: What the full install adds, none of which a node's install may bring.
NOT_ON_A_NODE = ("streamlit", "pandas", "plotly", "psycopg", "uvicorn")
INSTALL_TIMEOUT_S = 900
DEADLINE_S = 90.0


def wait_for(what: str, cond: Callable[[], bool], proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        assert proc.poll() is None, f"{proc.args} exited {proc.returncode} before {what}"
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def node_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv with this checkout installed as a node installs it."""
    tmp = tmp_path_factory.mktemp("node")
    src = tmp / "src"
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(path, src / name)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", f"{src}[collector]"],
        check=True, timeout=INSTALL_TIMEOUT_S, env=env,
    )  # fmt: skip
    return venv


def node_env(tmp: Path) -> dict[str, str]:
    """A node's shell: the node venv only, no setting of the test run's."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith("DSMON_")}
    for k in ("VIRTUAL_ENV", "PYTHONPATH"):
        keep.pop(k, None)
    return {**keep, "XDG_STATE_HOME": str(tmp / "state"), "HOME": str(tmp)}


def live_read(log: Path, run: str, node: str) -> set[str]:
    """What a collector reading the whole log live gives (no finish: it may grow)."""
    parser = LogParser(run, log.name, node)
    out: list[Record] = []
    offset = 0
    for n, raw in enumerate(log.read_bytes().splitlines(True), start=1):
        out += parser.feed(raw.decode(), offset=offset, line=n)
        offset += len(raw)
    return {encode(r) for r in out}


class Server:
    """``dsmon serve`` from the full install (the one running the tests), on a free port."""

    def __init__(self, tmp: Path) -> None:
        self.store = tmp / "store.sqlite"
        self.token_file = write_token_file(tmp / "token", TOKEN)
        cmd = [sys.executable, "-m", "cli.main", "serve", "--store", str(self.store)]
        cmd += ["--port", "0", "--token-file", str(self.token_file)]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()  # dsmon: ingest server on http://127.0.0.1:N, ...
        self.url = line.split(" on ", 1)[1].split(",", 1)[0]
        assert self.url.startswith("http://127.0.0.1:"), line

    def records(self, run: str) -> list[Record]:
        if not self.store.exists():
            return []
        with open_store(self.store) as store:
            return store.records(run)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path)
    yield srv
    srv.stop()


def test_the_node_install_has_none_of_the_dashboard_or_server(node_venv: Path) -> None:
    code = f"import importlib.util as u; print([m for m in {NOT_ON_A_NODE!r} if u.find_spec(m)])"
    out = subprocess.run(
        [str(node_venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
    # Only what the base dependencies bring: no extra was left out of the collector role.
    found = subprocess.run(
        [str(node_venv / "bin" / "python"), "-c", "import pynvml, watchdog, orjson, hjson, msgspec"]
    )
    assert found.returncode == 0


def test_collect_sends_a_real_log_to_a_real_server(
    node_venv: Path, server: Server, tmp_path: Path
) -> None:
    log = tmp_path / "run" / "train.log"
    log.parent.mkdir()
    shutil.copy(Z2_LOG, log)
    cmd = [str(node_venv / "bin" / "dsmon"), "collect", "--log", str(log), "--server", server.url]
    cmd += ["--token-file", str(server.token_file), "--run", "z2", "--node", "n1"]
    cmd += ["--nvml-interval", "0", "--poll-interval", "0.1"]
    collector = subprocess.Popen(cmd, env=node_env(tmp_path), stderr=subprocess.PIPE)
    want = live_read(Z2_LOG, "z2", "n1")
    try:
        wait_for(
            "the log's records",
            lambda: {encode(r) for r in server.records("z2")} == want,
            collector,
        )
    finally:
        collector.send_signal(signal.SIGTERM)
        _, err = collector.communicate(timeout=60)
    assert collector.returncode == 0, err.decode()
    assert sum('"kind":"timer"' in r for r in want) == 90  # the whole log: its 30 steps' timers


def test_run_starts_a_job_and_sends_its_records(
    node_venv: Path, server: Server, tmp_path: Path
) -> None:
    tiny = tmp_path / "tiny.py"
    tiny.write_text(
        f"import sys\nsys.stdout.write(open({str(Z2_LOG)!r}).read())\nsys.exit(3)\n",
        encoding="utf-8",
    )
    cmd = [str(node_venv / "bin" / "dsmon"), "run", "--server", server.url]
    cmd += ["--token-file", str(server.token_file), "--dir", str(tmp_path / "job")]
    cmd += ["--nvml-interval", "0", "--poll-interval", "0.1", "--"]
    cmd += [str(node_venv / "bin" / "python"), str(tiny)]
    done = subprocess.run(cmd, env=node_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr  # the job's status
    stored = server.records("job")
    timers = [r for r in stored if r.KIND == "timer"]
    assert len(timers) == 90  # 30 steps of the z2 run, three timer lines each
    assert sorted({r.step for r in timers}) == list(range(1, 31))


def test_a_command_of_the_full_install_says_which_extra(node_venv: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [str(node_venv / "bin" / "dsmon"), "dashboard", "--store", str(tmp_path / "s.sqlite")],
        env=node_env(tmp_path), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("dsmon: dashboard: needs streamlit, ")
    assert done.stderr.endswith("(pip install 'dsmon[all]', or '.[all]' in its checkout)\n")
