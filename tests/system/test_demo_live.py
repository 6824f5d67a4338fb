"""``dsmon demo`` replays the bundled real run live: real processes, a real store, a real UI.

The bundled run is DeepSpeed 0.19.8 ZeRO-2 output (tests/data/z2): 119 records from its
two files (ds_config.json and train.log), 30 optimizer steps. The store is polled from this
process while the demo writes it, as the dashboard reads it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest
from process_support import free_port, ui_healthy

from cli.demo import DEFAULT_DEMO_STORE, DEMO_RUN, demo_dir, live_target, load_demo
from cli.main import main
from dsmon.health.live import is_live
from dsmon.load.files import import_paths
from dsmon.store.records.runs import RunInfo
from dsmon.store.store import open_store

pytestmark = pytest.mark.slow

DEADLINE_S = 90.0
ALL_RECORDS = 119


def runs(store: Path) -> dict[str, RunInfo]:
    if not store.exists():
        return {}
    with open_store(store) as s:
        return {r.name: r for r in s.runs()}


class Demo:
    """A ``dsmon demo`` process with its output in a file."""

    def __init__(self, cwd: Path, *args: str) -> None:
        self.port = free_port()
        self.out = cwd / "demo.out"
        cmd = [
            sys.executable, "-m", "cli.main", "demo", "--no-browser",
            "--port", str(self.port), *args,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DSMON_", "STREAMLIT_"))}
        with self.out.open("wb") as out:
            self.proc = subprocess.Popen(
                cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env
            )

    @property
    def text(self) -> str:
        return self.out.read_text(encoding="utf-8", errors="replace")

    def wait_for(self, what: str, cond: Callable[[], bool], poll_s: float = 0.1) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not cond():
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.text}"
            assert time.monotonic() < deadline, f"gave up waiting for {what}:\n{self.text}"
            time.sleep(poll_s)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def demos() -> Iterator[list[Demo]]:
    started: list[Demo] = []
    yield started
    for d in started:
        d.kill()


def test_live_demo_into_a_named_store_adds_a_new_growing_run(
    tmp_path: Path, demos: list[Demo]
) -> None:
    store = tmp_path / "mine.sqlite"
    load_demo(str(store))  # a finished copy the user already has: it must stay as it is
    demo = Demo(tmp_path, "--store", str(store), "--speed", "10")
    demos.append(demo)

    seen: list[int] = []

    def new_run() -> RunInfo | None:
        found = [r for name, r in runs(store).items() if name != DEMO_RUN]
        return found[0] if found else None

    def finished() -> bool:
        info = new_run()
        if info is not None and (not seen or seen[-1] != info.n_records):
            seen.append(info.n_records)
        return bool(seen) and seen[-1] == ALL_RECORDS

    demo.wait_for("the whole replay", finished, poll_s=0.05)
    info = new_run()
    assert info is not None and re.fullmatch(r"demo-\d{8}-\d{6}", info.name)
    # It grew while the test watched (30 steps at 10 per second: 3 s), never shrank.
    assert seen == sorted(seen) and any(0 < n < ALL_RECORDS for n in seen), seen
    assert info.last_step == 30
    assert is_live(info.last_ts, datetime.now())  # how app.py tells a live run
    old = runs(store)[DEMO_RUN]
    assert old.n_records == ALL_RECORDS and not is_live(old.last_ts, datetime.now())

    demo.wait_for("the summary", lambda: "Steps       30" in demo.text)
    assert f"Playing     the bundled run as '{info.name}', 10 step(s)/s\n" in demo.text
    assert re.search(
        r"^Played back 119 records \(119 new\) from 2 file\(s\) in \d+\.\d s$",
        demo.text,
        re.MULTILINE,
    )
    assert f"Run         {info.name}\n" in demo.text
    assert "Steps       30 (with timer breakdown: 30)\n" in demo.text
    demo.wait_for("the UI", lambda: ui_healthy(demo.port))
    demo.proc.send_signal(signal.SIGTERM)
    assert demo.proc.wait(timeout=60) == 0
    assert not ui_healthy(demo.port)


def test_live_demo_recreates_the_default_store(tmp_path: Path, demos: list[Demo]) -> None:
    stale = tmp_path / DEFAULT_DEMO_STORE
    load_demo(str(stale))
    with open_store(stale) as s:  # an old finished demo plus another run
        import_paths(s, [demo_dir()], "old")
    assert set(runs(stale)) == {DEMO_RUN, "old"}
    before = runs(stale)[DEMO_RUN]
    demo = Demo(tmp_path, "--speed", "50")
    demos.append(demo)
    demo.wait_for("the summary", lambda: "Steps       30" in demo.text)
    after = runs(stale)
    assert list(after) == [DEMO_RUN]
    assert after[DEMO_RUN].n_records == ALL_RECORDS
    assert after[DEMO_RUN].first_ts != before.first_ts
    assert is_live(after[DEMO_RUN].last_ts, datetime.now())
    assert "Store       dsmon-demo.sqlite\n" in demo.text
    demo.wait_for("the UI", lambda: ui_healthy(demo.port))
    demo.proc.send_signal(signal.SIGINT)
    assert demo.proc.wait(timeout=60) == 0


def test_sigterm_during_the_replay_stops_it(tmp_path: Path, demos: list[Demo]) -> None:
    store = tmp_path / "s.sqlite"
    demo = Demo(tmp_path, "--store", str(store), "--speed", "0.1")  # 300 s: still replaying
    demos.append(demo)
    demo.wait_for("the UI", lambda: ui_healthy(demo.port))
    demo.proc.send_signal(signal.SIGTERM)
    assert demo.proc.wait(timeout=60) == 0
    (info,) = runs(store).values()
    assert 0 < info.n_records < ALL_RECORDS  # stopped part-way, what was written is kept
    assert "Replayed" not in demo.text
    assert not ui_healthy(demo.port)


def test_live_target_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"{DEFAULT_DEMO_STORE}{suffix}").write_bytes(b"old")
    assert live_target(None, datetime(2026, 11, 29, 14, 10, 59)) == (DEFAULT_DEMO_STORE, "demo")
    assert list(tmp_path.iterdir()) == []
    when = datetime(2026, 11, 29, 14, 10, 59)
    assert live_target("x.sqlite", when) == ("x.sqlite", "demo-20261129-141059")


def test_speed_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--store", "unused.sqlite", "--speed", "0"]) == 1
    assert capsys.readouterr().err == (
        "dsmon: demo: --speed 0.0: must be more than 0 steps per second\n"
    )
