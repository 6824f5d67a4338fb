"""The live replay core (dsmon/load/playback.py) on the bundled real run (DeepSpeed 0.19.8 ZeRO-2).

The bundled run is tests/data/z2 byte for byte (tests/unit/cli/test_cli.py checks it). Timestamps and
line numbers below are read from dsmon/data/demo/train.log: the prelude ends with the
config dump at 14:11:04.882 (line 152), step 1 begins with the ZeRO optimizer timer line
182, step 5's step= line 199 is stamped 14:11:06.413 and its throughput line 200 06.416.
Pacing is checked exactly on a fake clock and only loosely (lower bounds) on the real one.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from cli.demo import demo_dir
from dsmon.load.files import import_paths, plan, read_found
from dsmon.load.kinds import InputError
from dsmon.load.playback import (
    Pace,
    PlaybackResult,
    PlaybackThread,
    TimeShifter,
    play_paths,
    step_batches,
)
from dsmon.model.records import Record, record_key
from dsmon.parse.base import Diagnostics
from dsmon.store.store import open_store

BASE = datetime(2030, 1, 1)


def demo_records() -> list[Record]:
    diag = Diagnostics()
    return [r for f in plan([demo_dir()], "demo")["demo"] for r in read_found(f, "demo", diag)]


class FakeTime:
    """A monotonic clock that only moves when the replay waits; wall time follows it."""

    def __init__(self) -> None:
        self.t = 100.0
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.t

    def now(self) -> datetime:
        return BASE + timedelta(seconds=self.t - 100.0)

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.t += seconds
        return False

    def pace(self, speed: float) -> Pace:
        return Pace(speed=speed, clock=self.clock, now=self.now, wait=self.wait)


def without_ts(records: list[Record]) -> list[Record]:
    return [dataclasses.replace(r, ts=None) for r in records]


def test_batches_are_the_prelude_then_one_per_optimizer_step() -> None:
    batches = list(step_batches(demo_records()))
    assert [o for o, _ in batches] == list(range(31))
    prelude = batches[0][1]
    assert len(prelude) == 14  # with the two ZeRO bucket-size events
    assert prelude[0].KIND == "config" and prelude[0].src.file == "ds_config.json"
    assert prelude[-1].src.line == 152  # the end of DeepSpeed's config dump
    assert [(r.KIND, r.step) for r in prelude if r.step is not None] == [("step", 0)]
    one = batches[1][1]
    assert [(r.KIND, r.step, r.src.line) for r in one] == [
        ("timer", 1, 182),
        ("timer", 1, 183),
        ("timer", 1, 184),
    ]
    # Step 30 also takes the launcher's two "exits successfully" lines (365, 366).
    last = batches[30][1]
    assert [r.src.line for r in last] == [358, 359, 360, 361, 362, 365, 366]
    # Nothing lost, nothing reordered.
    assert [r for _, b in batches for r in b] == demo_records()


def test_batches_tolerate_gaps_and_repeats_in_step_numbers() -> None:
    recs = demo_records()
    steps = [r for r in recs if r.step is not None and r.step >= 1]
    renumbered = [dataclasses.replace(r, step=r.step * 10) for r in steps]  # 10, 20, ...
    assert [o for o, _ in step_batches(renumbered)] == list(range(1, 31))


def test_shifter_puts_the_newest_at_now_and_keeps_spacing() -> None:
    batches = [b for _, b in step_batches(demo_records())]
    shifter = TimeShifter()
    prelude = shifter.shift(batches[0], BASE)
    assert prelude[0].ts is None  # ds_config.json has no time: left alone
    assert prelude[-1].ts == "2030-01-01T00:00:00.000"  # 14:11:04.882 -> now
    # Line 5 (14:11:01.103) was 3.779 s before the newest: it stays 3.779 s before.
    assert prelude[1].src.line == 5 and prelude[1].ts == "2029-12-31T23:59:56.221"


def test_shifter_never_goes_back_in_time() -> None:
    batches = [b for _, b in step_batches(demo_records())]
    shifter = TimeShifter()
    shifter.shift(batches[0], BASE)
    # Step 5 replayed 2 s later: its throughput line (14:11:06.416, the newest) lands at now,
    # the step= line 3 ms before; its optimizer timer line, stamped with the last time seen
    # before it (04.882, 1.534 s earlier), would fall before the prelude's newest: clamped.
    five = {r.src.line: r.ts for r in shifter.shift(batches[5], BASE + timedelta(seconds=2))}
    assert five[200] == "2030-01-01T00:00:02.000"
    assert five[199] == "2030-01-01T00:00:01.997"
    assert five[198] == "2030-01-01T00:00:00.466"
    late = {r.src.line: r.ts for r in shifter.shift(batches[5], BASE + timedelta(seconds=2.5))}
    assert late[198] == "2030-01-01T00:00:02.000"  # not before the previous batch's newest


def test_pace_is_one_batch_per_step_at_the_speed_asked(tmp_path: Path) -> None:
    fake = FakeTime()
    seen: list[tuple[float, int]] = []
    with open_store(tmp_path / "s.sqlite") as store:
        res = play_paths(
            store, [demo_dir()], "demo", fake.pace(2.0), lambda r: seen.append((fake.t, r.records))
        )
        stamps = [datetime.fromisoformat(r.ts) for r in store.records("demo") if r.ts]
    assert fake.waits == [0.5] * 30
    assert res.elapsed_s == 15.0 and res.steps == 30 and not res.stopped
    assert (res.files, res.records, res.inserted) == (2, 119, 119)
    assert seen[0] == (100.0, 14) and seen[1] == (100.5, 17) and seen[-1] == (115.0, 119)
    assert max(stamps) == BASE + timedelta(seconds=15)
    assert stamps == sorted(stamps)


def test_finished_replay_stores_what_an_instant_import_stores(tmp_path: Path) -> None:
    with open_store(tmp_path / "instant.sqlite") as a, open_store(tmp_path / "live.sqlite") as b:
        import_paths(a, [demo_dir()], "demo")
        res = play_paths(b, [demo_dir()], "demo", FakeTime().pace(math.inf))
        instant, live = a.records("demo"), b.records("demo")
        assert b.add(demo_records()) == 0  # the same identities: nothing new
    assert res.inserted == len(instant) == 119
    assert without_ts(live) == without_ts(instant)
    assert [record_key(r) for r in live] == [record_key(r) for r in instant]
    assert all(x.ts != y.ts for x, y in zip(live, instant, strict=True) if y.ts is not None)


@pytest.mark.slow  # real time: a playback paced by the clock
def test_real_time_replay_grows_in_file_order_and_ends_now(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    expected = without_ts(demo_records())
    reader = open_store(path)
    visible: list[int] = []

    def check(res: PlaybackResult) -> None:  # another connection sees each batch committed
        got = without_ts(reader.records("demo"))
        assert got == expected[: res.records]
        visible.append(len(got))

    with open_store(path) as store:
        res = play_paths(store, [demo_dir()], "demo", Pace(speed=50.0), check)
        newest = max(datetime.fromisoformat(r.ts) for r in store.records("demo") if r.ts)
    reader.close()
    assert visible[0] == 14 and visible[-1] == 119 and len(visible) == 31
    assert visible == sorted(visible)
    assert res.elapsed_s >= 30 / 50  # 30 steps at 50 per second: never faster
    assert abs((datetime.now() - newest).total_seconds()) < 30


def test_thread_can_be_stopped_between_steps(tmp_path: Path) -> None:
    replay = PlaybackThread(str(tmp_path / "s.sqlite"), [demo_dir()], "demo", 1.0).start()
    assert replay.first.wait(30)
    replay.stop()
    assert replay.done and replay.error is None and replay.result is not None
    assert replay.result.stopped and replay.result.steps < 30
    with open_store(tmp_path / "s.sqlite") as store:
        assert len(store.records("demo")) == replay.result.records < 119


def test_thread_reports_a_failure_instead_of_raising(tmp_path: Path) -> None:
    replay = PlaybackThread(str(tmp_path / "s.sqlite"), [tmp_path / "nope"], "demo", 1.0).start()
    assert replay.first.wait(30)
    replay.stop()
    assert isinstance(replay.error, InputError)
    assert str(replay.error) == f"cannot read {tmp_path / 'nope'}: No such file or directory"


def test_pace_wait_is_interruptible() -> None:
    stop = threading.Event()
    stop.set()
    assert Pace(speed=1.0, wait=stop.wait).wait(60) is True


def test_infinite_speed_never_waits() -> None:
    assert Pace(speed=math.inf).due(0.0, 1000) == 0.0
    assert Pace(speed=4.0, clock=lambda: 1.0).due(0.0, 10) == 1.5


def test_shifter_moves_a_heartbeats_phase_since_with_its_time() -> None:
    """A replayed rank is in its phase for as long as it was in the run, not since the run."""
    from locations import DATA

    from dsmon.model.records import HeartbeatRecord
    from dsmon.model.units import parse_ts

    diag = Diagnostics()
    found = plan([DATA / "probe_hang"], "hang")["hang"]
    beats = [
        r for f in found for r in read_found(f, "hang", diag) if isinstance(r, HeartbeatRecord)
    ]
    assert len(beats) > 10
    shifted = TimeShifter().shift(beats, BASE)
    for old, new in zip(beats, shifted, strict=True):
        ts0, since0, ts1, since1 = map(parse_ts, (old.ts, old.phase_since, new.ts, new.phase_since))
        assert ts0 and since0 and ts1 and since1
        assert ts1 - since1 == ts0 - since0  # the same time in the phase
        assert ts1 <= BASE
