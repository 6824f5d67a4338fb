"""Live replay of a saved run: its records written into a store step by step, as if training now.

``dsmon demo`` shows what dsmon does during a run, not only after one, with nothing but
the bundled log: the same discovery and parsers as ``dsmon import`` (``dsmon.load.files``, whose
logs go line by line through :class:`dsmon.parse.log.LogParser`) produce the records, and
this module releases them one optimizer step at a time, at a pace a person can watch. The
dashboard calls a run live when its newest record is recent (``dsmon.health.live.is_live``), so
every batch is moved in time until its newest record is "now" as it is written; records
of one step keep their spacing from the original run, and time never runs backwards.

Apart from the timestamps, a finished replay stores exactly what an instant import stores:
same records, same identities (``record_key``), same order.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from dsmon.load.files import plan, read_found
from dsmon.load.rotated import Carries
from dsmon.model.records import HeartbeatRecord, Record
from dsmon.model.units import parse_ts
from dsmon.parse.base import Diagnostics
from dsmon.store.store import Store, open_store

#: Optimizer steps written per second unless told otherwise.
DEFAULT_SPEED = 1.0


@dataclass(slots=True)
class PlaybackResult:
    """What a replay wrote: counts for the report, and whether it was cut short."""

    run: str
    files: int = 0
    records: int = 0
    inserted: int = 0
    steps: int = 0
    elapsed_s: float = 0.0
    stopped: bool = False
    diag: Diagnostics = field(default_factory=Diagnostics)


def step_batches(records: Iterable[Record]) -> Iterator[tuple[int, list[Record]]]:
    """Records grouped by the optimizer step they belong to, with the step's ordinal.

    A batch starts at the first record of a step (1 or more) above every step seen so far;
    it takes everything read until the next such record, unstepped records included, so the
    order of the input is kept. Ordinal 0 is what comes before the first step (launcher,
    engine set-up, config); ordinals count batches, so gaps in step numbers do not stall
    the replay.
    """
    batch: list[Record] = []
    ordinal, top = 0, 0
    for rec in records:
        if rec.step is not None and rec.step > top:
            if batch:
                yield ordinal, batch
            batch, top = [], rec.step
            ordinal += 1
        batch.append(rec)
    if batch:
        yield ordinal, batch


class TimeShifter:
    """Moves each batch's timestamps so its newest is ``now``; never earlier than before.

    Records of a batch keep their spacing from the original run; a record that would land
    before the previous batch's newest (a replay faster than the run was) is put at that
    time instead, so the run's clock only moves forward.
    """

    def __init__(self) -> None:
        self.floor: datetime | None = None

    def shift(self, batch: list[Record], now: datetime) -> list[Record]:
        """The batch with moved timestamps (records without a readable one unchanged)."""
        stamps = [parse_ts(r.ts) for r in batch]
        known = [t for t in stamps if t is not None]
        if not known:
            return batch
        delta = now - max(known)
        out = []
        for rec, t in zip(batch, stamps, strict=True):
            if t is None:
                out.append(rec)
                continue
            moved = t + delta if self.floor is None else max(t + delta, self.floor)
            out.append(_moved(rec, moved, moved - t))
        self.floor = now
        return out


def _moved(rec: Record, ts: datetime, by: timedelta) -> Record:
    """``rec`` stamped ``ts``; a heartbeat's ``phase_since`` moved by as much as its ``ts``.

    A heartbeat says since when its rank is in its phase on the same clock as ``ts``: left
    on the original run's clock, a replayed rank would look stuck in its phase for as long
    ago as the run was made, and every replayed probed run would show a hang.
    """
    stamp = ts.isoformat(timespec="milliseconds")
    if isinstance(rec, HeartbeatRecord) and (since := parse_ts(rec.phase_since)) is not None:
        moved = (since + by).isoformat(timespec="milliseconds")
        return dataclasses.replace(rec, ts=stamp, phase_since=moved)
    return dataclasses.replace(rec, ts=stamp)


@dataclass(slots=True)
class Pace:
    """When to write step ordinal ``n``: ``n / speed`` seconds after the start.

    ``clock``, ``now`` and ``wait`` are the monotonic clock, the wall clock written into
    records, and an interruptible sleep (``Event.wait``: True when told to stop).
    """

    speed: float = DEFAULT_SPEED
    clock: Callable[[], float] = time.monotonic
    now: Callable[[], datetime] = datetime.now
    wait: Callable[[float], bool] = field(default_factory=lambda: threading.Event().wait)

    def due(self, start: float, ordinal: int) -> float:
        """Seconds left until ordinal ``ordinal`` is due (0 or less: due now)."""
        if math.isinf(self.speed):
            return 0.0
        return start + ordinal / self.speed - self.clock()


#: Told after each committed batch: the result so far (counts, step ordinal).
OnBatch = Callable[[PlaybackResult], object]


def play_records(
    records: Iterable[Record],
    store: Store,
    result: PlaybackResult,
    pace: Pace,
    on_batch: OnBatch | None = None,
) -> PlaybackResult:
    """Write ``records`` into ``store`` one step at a time at ``pace``; fills ``result``.

    Each batch is committed as it is written (``Store.add``), so a reader sees the run grow;
    ``on_batch`` is called after each commit.
    """
    start = pace.clock()
    shifter = TimeShifter()
    for ordinal, batch in step_batches(records):
        delay = pace.due(start, ordinal)
        if delay > 0 and pace.wait(delay):
            result.stopped = True
            break
        result.inserted += store.add(shifter.shift(batch, pace.now()), live=True)
        result.records += len(batch)
        result.steps = ordinal
        if on_batch is not None:
            on_batch(result)
    result.elapsed_s = pace.clock() - start
    return result


def play_paths(
    store: Store, paths: list[Path], run: str, pace: Pace, on_batch: OnBatch | None = None
) -> PlaybackResult:
    """Replay files and run folders (as ``dsmon import`` finds them) under the name ``run``.

    Raises:
        dsmon.load.files.InputError: a path does not exist or cannot be read.
    """
    inputs = [f for found in plan(paths, run).values() for f in found]
    result = PlaybackResult(run, files=len(inputs))

    def records() -> Iterator[Record]:
        carries: Carries = {}
        for found in inputs:
            yield from read_found(found, run, result.diag, carries=carries)

    return play_records(records(), store, result, pace, on_batch)


class PlaybackThread:
    """A replay running in a daemon thread with its own store connection.

    ``first`` is set once the first batch is committed (or the replay ended), so a caller
    can open the dashboard on a store that already holds the run. A failure in the thread
    is kept in ``error`` for the caller to report.
    """

    def __init__(self, store_url: str, paths: list[Path], run: str, speed: float) -> None:
        self.store_url = store_url
        self.paths = paths
        self.run = run
        self.result: PlaybackResult | None = None
        self.error: BaseException | None = None
        self.first = threading.Event()
        self._stop = threading.Event()
        self._pace = Pace(speed=speed, wait=self._stop.wait)
        self._thread = threading.Thread(target=self._main, name="dsmon-replay", daemon=True)

    def start(self) -> PlaybackThread:
        """Start replaying; returns self."""
        self._thread.start()
        return self

    @property
    def done(self) -> bool:
        """Whether the replay has ended (finished, stopped or failed)."""
        return self._thread.ident is not None and not self._thread.is_alive()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop between two steps and wait for the thread (its last batch is committed)."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout_s)

    def _main(self) -> None:
        try:
            with open_store(self.store_url) as store:
                self.result = play_paths(
                    store, self.paths, self.run, self._pace, lambda _: self.first.set()
                )
        except Exception as exc:  # noqa: BLE001 - handed to the caller, which reports it
            self.error = exc
        finally:
            self.first.set()
