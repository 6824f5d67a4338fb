"""A real collector, ingest server and store as processes, for the end-to-end collect tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from locations import DATA

from dsmon.model.records import Record
from dsmon.model.wire import encode
from dsmon.parse.log import LogParser
from dsmon.serve.tokens import write_token_file
from dsmon.store.store import open_store

Z2_LINES = (DATA / "z2" / "train.log").read_bytes().splitlines(True)


PROFILE = (DATA / "flops_detailed_file" / "flops_profile.txt").read_bytes()


TOKEN = "e2e-token-0123456789abcdef"


DEADLINE_S = 90.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dsmon(*args: str, log: Path) -> subprocess.Popen[bytes]:
    out = log.open("ab")
    cmd = [sys.executable, "-m", "cli.main", *args]
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ})


def wait_for(what: str, cond: Callable[[], bool], procs: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        for p in procs:
            assert p.poll() is None, f"{p.args} exited with {p.returncode} while waiting for {what}"
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def expected(run: str, node: str, lines: int = len(Z2_LINES)) -> set[str]:
    """What an uninterrupted live read of the log's first lines gives (no finish: it may grow)."""
    parser = LogParser(run, "train.log", node)
    out: list[Record] = []
    offset = 0
    for n, raw in enumerate(Z2_LINES[:lines], start=1):
        out += parser.feed(raw.decode(), offset=offset, line=n)
        offset += len(raw)
    return {encode(r) for r in out}


def stored(store_path: Path, run: str) -> list[str]:
    if not store_path.exists():
        return []
    store = open_store(store_path)
    try:
        return [encode(r) for r in store.records(run)]
    finally:
        store.close()


class Cluster:
    """A server process and collector processes, all stopped at the end of a test."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.store = tmp / "store.sqlite"
        self.token_file = write_token_file(tmp / "token", TOKEN)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.server: subprocess.Popen[bytes] | None = None

    def start_server(self) -> None:
        self.server = self._spawn(
            "serve", "--store", str(self.store), "--port", str(self.port),
            "--token-file", str(self.token_file), name="server",
        )  # fmt: skip
        wait_for("the server to listen", self._listening, [self.server])

    def collector(self, log: Path, node: str, *extra: str) -> subprocess.Popen[bytes]:
        return self._spawn(
            "collect", "--log", str(log), "--server", f"http://127.0.0.1:{self.port}",
            "--token-file", str(self.token_file), "--node", node, "--run", "z2",
            "--state-dir", str(self.tmp / f"state-{node}"), "--nvml-interval", "0",
            "--poll-interval", "0.1", "--retry-max", "1", *extra, name=f"collect-{node}",
        )  # fmt: skip

    def _spawn(self, *args: str, name: str) -> subprocess.Popen[bytes]:
        proc = dsmon(*args, log=self.tmp / f"{name}.out")
        self.procs.append(proc)
        return proc

    def _listening(self) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
