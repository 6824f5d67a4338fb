"""What the live-collection benchmarks share: real log lines, real processes, a small API client.

The benchmarks measure dsmon as it is deployed: ``dsmon serve`` and ``dsmon collect`` run as
their own processes on 127.0.0.1 (so the benchmark's own threads never share a GIL with
them), the lines written come from the real DeepSpeed run bundled with dsmon, and what is
"visible" is what a script reads back through ``GET /v1/records``. Keeping the plumbing here
keeps each benchmark script down to what it measures.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from collectors.send.transport import HttpResponse, UrlTransport
from dsmon.serve.tokens import write_token_file

ROOT = Path(__file__).resolve().parent.parent
DEMO_LOG = ROOT / "dsmon" / "data" / "demo" / "train.log"
TOKEN = "bench-token-0123456789abcdef"
START_TIMEOUT_S = 60.0
_STEP_NUMBERS = re.compile(
    r"(step=|global_step=|micro_step=|\[train\.py\] step |global_steps )(\d+)"
)


def demo_parts() -> tuple[list[str], list[str]]:
    """The demo log's start-up lines and its training section (first timer to last step line).

    The start-up part matters: it tells the parser the log begins with the run, so step
    numbers are known at once and records leave the parser as soon as their line is read.
    """
    lines = DEMO_LOG.read_text(encoding="utf-8").splitlines(keepends=True)
    first = next(i for i, ln in enumerate(lines) if "time (ms) |" in ln)
    last = max(i for i, ln in enumerate(lines) if "| step:" in ln)
    return lines[:first], lines[first : last + 1]


def timer_lines() -> list[str]:
    """Every engine timer line of the demo log (``time (ms) | ...``), in file order."""
    return [ln for ln in demo_parts()[1] if "time (ms) |" in ln]


def renumbered(section: Sequence[str], shift: int) -> list[str]:
    """The training section with its step numbers moved on by ``shift`` (a later repetition)."""

    def bump(m: re.Match[str]) -> str:
        return f"{m.group(1)}{int(m.group(2)) + shift}"

    return [_STEP_NUMBERS.sub(bump, ln) for ln in section]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100): a value that was actually observed."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dsmon_process(
    args: Sequence[str], out: Path, *, script: Path | None = None
) -> subprocess.Popen[bytes]:
    """``python -m cli.main ARGS`` (or ``python SCRIPT ARGS``), output to ``out``."""
    head = [str(script)] if script else ["-m", "cli.main"]
    with out.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, *head, *args], stdout=sink, stderr=subprocess.STDOUT
        )


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> int:
    """SIGTERM, then SIGKILL if it does not end in time; returns the exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def wait_for(what: str, cond: Callable[[], bool], procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """Poll ``cond`` until true; stop with a clear message if a process dies or time runs out."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not cond():
        for p in procs:
            if p.poll() is not None:
                raise SystemExit(f"bench: {p.args!s} exited ({p.returncode}) waiting for {what}")
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: gave up waiting for {what}")
        time.sleep(0.05)


class IngestServer:
    """``dsmon serve`` in its own process, on a fresh port, with the benchmark's token."""

    def __init__(self, tmp: Path, store: Path | str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token_file = write_token_file(tmp / "token", TOKEN)
        args = ["serve", "--store", str(store), "--port", str(self.port)]
        self.proc = dsmon_process([*args, "--token-file", str(self.token_file)], tmp / "serve.out")
        wait_for("the ingest server", self._listening, [self.proc])

    def _listening(self) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def stop(self) -> None:
        """End the server (every answered batch is already committed)."""
        stop(self.proc)


class ApiClient:
    """GET and POST on the ingest API over one kept-alive connection (the sender's transport)."""

    def __init__(self, url: str) -> None:
        self.transport = UrlTransport(url, TOKEN)
        parts = urlsplit(url)
        self._conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)

    def post(self, body: bytes) -> HttpResponse:
        """POST one gzipped JSON-lines batch to ``/v1/records``."""
        return self.transport.post(body)

    def get(self, path: str, **params: Any) -> Any:
        """The JSON answer of ``GET path?params``."""
        query = f"{path}?{urlencode(params)}" if params else path
        try:
            status, body = self._get(query)
        except (OSError, http.client.HTTPException):  # a kept-alive connection the server closed
            self._conn.close()
            status, body = self._get(query)
        if status != 200:
            raise SystemExit(f"bench: GET {query}: {status} {body[:200]!r}")
        return json.loads(body)

    def _get(self, query: str) -> tuple[int, bytes]:
        self._conn.request("GET", query, headers={"Authorization": f"Bearer {TOKEN}"})
        resp = self._conn.getresponse()
        return resp.status, resp.read()

    def kinds(self, run: str) -> dict[str, int]:
        """Records stored for ``run``, by kind (empty while the run is unknown)."""
        for info in self.get("/v1/runs")["runs"]:
            if info["name"] == run:
                return dict(info["kinds"])
        return {}


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process and all its threads, from ``/proc/PID/stat``."""
    return _stat_seconds(Path(f"/proc/{pid}/stat"))


def thread_cpu(pid: int) -> dict[int, tuple[float, int]]:
    """CPU seconds and voluntary context switches (wake-ups) of each live thread, by thread id.

    The switch count does not depend on how fast the machine is: it tells how often each
    thread sleeps and wakes, which is most of what an idle-ish collector costs.
    """
    out: dict[int, tuple[float, int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(task.name)] = (_stat_seconds(task / "stat"), _switches(task / "status"))
        except (OSError, ValueError):
            continue  # the thread ended meanwhile
    return out


def _switches(status: Path) -> int:
    for line in status.read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return 0


def _stat_seconds(stat: Path) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_SLEEPER = """
import sys, threading, time
def loop(gap):
    ev = threading.Event()
    while True:
        ev.wait(gap)
for gap in sys.argv[1:]:
    threading.Thread(target=loop, args=(float(gap),), daemon=True).start()
print("ready", flush=True)
sys.stdin.readline()
"""


class Sleeper:
    """A control process whose threads only wait with a timeout, as the collector's do when idle.

    On a virtual machine a thread that wakes from a long sleep can be charged the host's
    latency in waking the virtual CPU, so the same collector measures two or three times
    dearer on an idle VM than on a busy one. Run beside the collector over the same window,
    this process tells what that machine charges for nothing but the wake-ups.

    Args:
        gaps_s: one thread per entry, waking every that many seconds.
    """

    def __init__(self, gaps_s: Sequence[float]) -> None:
        self.wakes_per_s = sum(1 / g for g in gaps_s)
        cmd = [sys.executable, "-c", _SLEEPER, *map(str, gaps_s)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.proc.stdout.readline()

    def cpu_seconds(self) -> float:
        """CPU time the control process used so far."""
        return cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        """End the control process."""
        self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def rss_mib(pid: int) -> float:
    """Resident memory of a process in MiB, from ``/proc/PID/status``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Appender:
    """Appends lines to a log the way a training process does: unbuffered, one write each."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.lines = 0

    def write(self, *lines: str) -> int:
        """Append the lines; returns the number (1-based) of the last line written."""
        os.write(self._fd, "".join(lines).encode("utf-8"))
        self.lines += len(lines)
        return self.lines

    def close(self) -> None:
        """Close the file."""
        os.close(self._fd)
