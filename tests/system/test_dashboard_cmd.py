"""``dsmon dashboard`` as a real process: Streamlit UI and ingest API together, on 127.0.0.1.

The records posted are the real ZeRO-2 log of the corpus (tests/data/z2/train.log, read
with the parsers, as a collector would send them). Step 1's global timer line (line 184)
reads ``fwd: 350.75 | bwd: 754.18 | bwd_inner: 675.36 | bwd_allreduce: 78.63 | step: 190.22``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cli.main import build_parser, main
from dsmon.model import wire
from dsmon.model.records import Record, TimerRecord
from dsmon.serve.tokens import write_token_file

pytestmark = pytest.mark.slow

TOKEN = "dashboard-test-token-0123456789"
DEADLINE_S = 90.0


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: each socket is held until all are picked (picked one after
    the other, the UI and ingest ports came out the same once, and the dashboard could not
    start)."""
    with contextlib.ExitStack() as held:
        socks = [held.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def no_token_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("DSMON_", "STREAMLIT_"))}


class Dashboard:
    """A ``dsmon dashboard`` process with its output in a file."""

    def __init__(self, tmp: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.ui, self.ingest = free_ports(2)
        self.out = tmp / "dashboard.out"
        cmd = [
            sys.executable, "-m", "cli.main", "dashboard", "--store", str(tmp / "s.sqlite"),
            "--port", str(self.ui), "--ingest-port", str(self.ingest), "--no-browser", *args,
        ]  # fmt: skip
        with self.out.open("wb") as out:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env or no_token_env()
            )

    @property
    def text(self) -> str:
        return self.out.read_text(encoding="utf-8", errors="replace")

    def wait_for(self, what: str, cond: Callable[[], bool]) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not cond():
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.text}"
            assert time.monotonic() < deadline, f"gave up waiting for {what}:\n{self.text}"
            time.sleep(0.1)

    def ui_healthy(self) -> bool:
        return get_text(f"http://127.0.0.1:{self.ui}/_stcore/health") == "ok"

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=60)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def get_text(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return str(resp.read().decode())
    except OSError:
        return None


def request(
    port: int, method: str, path: str, token: str, body: bytes | None = None
) -> tuple[int, dict[str, object]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"}
        conn.request(method, path, body, headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def ndjson(records: list[Record]) -> bytes:
    return "\n".join(wire.encode(r) for r in records).encode()


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.fixture
def dashboards() -> Iterator[list[Dashboard]]:
    started: list[Dashboard] = []
    yield started
    for d in started:
        d.kill()


def test_dashboard_serves_ui_and_ingest_until_sigterm(
    tmp_path: Path, dashboards: list[Dashboard], z2_log_records: list[Record]
) -> None:
    token_file = write_token_file(tmp_path / "token", TOKEN)
    d = Dashboard(tmp_path, "--token-file", str(token_file))
    dashboards.append(d)
    d.wait_for(
        "the ingest API", lambda: get_text(f"http://127.0.0.1:{d.ingest}/healthz") is not None
    )
    health = json.loads(get_text(f"http://127.0.0.1:{d.ingest}/healthz") or "{}")
    assert health == {"status": "ok", "last_id": 0}

    body = ndjson(z2_log_records)
    assert request(d.ingest, "POST", "/v1/records", "wrong-token-0123456789", body)[0] == 401
    status, answer = request(d.ingest, "POST", "/v1/records", TOKEN, body)
    assert (status, answer) == (200, {"accepted": 118, "inserted": 118})
    status, page = request(d.ingest, "GET", "/v1/records?run=z2&kind=timer&limit=1000", TOKEN)
    assert status == 200
    timers = page["records"]
    assert isinstance(timers, list) and len(timers) == 90
    step1 = [t for t in timers if t["group"] == "global" and t["step"] == 1]
    assert [(t["src"]["line"], t["values_ms"]) for t in step1] == [
        (
            184,
            {
                "fwd": 350.75,
                "bwd": 754.18,
                "bwd_inner": 675.36,
                "bwd_allreduce": 78.63,
                "step": 190.22,
            },
        )
    ]

    d.wait_for("the UI", d.ui_healthy)
    assert f"ingest API on http://127.0.0.1:{d.ingest} " in d.text
    assert f"dashboard on http://127.0.0.1:{d.ui} " in d.text
    assert "ingest token (generated" not in d.text  # it came from the file
    assert d.stop(signal.SIGTERM) == 0
    assert not listening(d.ui) and not listening(d.ingest)
    assert bindable(d.ui) and bindable(d.ingest)
    assert children(d.proc.pid) == []


def test_generated_token_is_printed_and_the_ui_dying_stops_ingest(
    tmp_path: Path, dashboards: list[Dashboard], z2_log_records: list[Record]
) -> None:
    d = Dashboard(tmp_path)
    dashboards.append(d)
    d.wait_for("the token banner", lambda: "ingest token (generated" in d.text)
    m = re.search(r"ingest token \(generated, keep it secret\): (\S+)\n", d.text)
    assert m is not None
    token = m.group(1)
    assert len(token) >= 43  # 256 bits, URL-safe base64
    assert f"dsmon collect --server http://127.0.0.1:{d.ingest} " in d.text
    first = [r for r in z2_log_records if isinstance(r, TimerRecord)][:3]
    assert request(d.ingest, "POST", "/v1/records", token, ndjson(first)) == (
        200,
        {"accepted": 3, "inserted": 3},
    )
    d.wait_for("the UI", d.ui_healthy)
    (ui_pid,) = children(d.proc.pid)
    os.kill(ui_pid, signal.SIGKILL)
    assert d.proc.wait(timeout=60) == 128 + signal.SIGKILL
    assert "dsmon: dashboard: the dashboard exited with status 137" in d.text
    assert not listening(d.ingest)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_dashboard_killed_outright_takes_its_streamlit_with_it(
    tmp_path: Path, dashboards: list[Dashboard]
) -> None:
    """SIGKILL (the OOM killer) gives no chance to stop the child: the kernel ends it."""
    d = Dashboard(tmp_path, "--token-file", str(write_token_file(tmp_path / "token", TOKEN)))
    dashboards.append(d)
    d.wait_for("the UI", d.ui_healthy)
    (ui,) = children(d.proc.pid)
    d.stop(signal.SIGKILL)
    deadline = time.monotonic() + DEADLINE_S
    while Path(f"/proc/{ui}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{ui}").exists(), f"Streamlit {ui} outlived its dashboard"
    assert bindable(d.ui)


def test_no_ingest_serves_the_ui_alone(tmp_path: Path, dashboards: list[Dashboard]) -> None:
    d = Dashboard(tmp_path, "--no-ingest")
    dashboards.append(d)
    d.wait_for("the UI", d.ui_healthy)
    assert not listening(d.ingest)
    assert "ingest API" not in d.text and "ingest token" not in d.text
    assert children(d.proc.pid) == []  # the process became Streamlit (exec)
    assert d.stop(signal.SIGTERM) == 0
    assert not listening(d.ui)


def test_ingest_port_in_use_is_one_line_and_starts_no_ui(
    tmp_path: Path, dashboards: list[Dashboard]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        d = Dashboard(tmp_path, "--ingest-port", str(port))  # the last --ingest-port wins
        dashboards.append(d)
        assert d.proc.wait(timeout=60) == 1
    lines = d.text.splitlines()
    assert lines == [
        f"dsmon: dashboard: --ingest-port {port}: cannot listen on 127.0.0.1:{port} (in use); "
        "stop what uses it, or give another --ingest-port"
    ]
    assert not listening(d.ui)


def test_port_out_of_range_is_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["dashboard", "--ingest-port", "70000", "--token-file", "/nonexistent"]) == 1
    assert (
        capsys.readouterr().err
        == "dsmon: dashboard: --ingest-port 70000: not a TCP port (1-65535)\n"
    )


def test_ingest_defaults() -> None:
    args = build_parser().parse_args(["dashboard"])
    assert (args.port, args.address, args.ingest_port, args.ingest_address) == (
        8501,
        "127.0.0.1",
        8502,
        None,
    )
    assert args.no_ingest is False and args.token_file is None
