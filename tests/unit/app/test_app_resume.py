"""An open page follows its run by itself: a finished run that goes on comes back live, and a
live run that stops is no longer called live in the sidebar either, without the user clicking.
The picker names only what the evidence shows: ``imported``, ``live``, a witnessed end, or
``not live`` when the sender stopped (how the run ended is the status line's to judge).

The real app (AppTest) on the real z2 run (DeepSpeed 0.19.8, ZeRO-2, 30 steps) cut at step 15,
as a run stopped there and resumed from its checkpoint would be stored. Page timers are fired
as a browser fires them (tests/fragment_timers.py).
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from dashboard_support import app_at, read_records
from fragment_timers import Timers

from dsmon.health import live as live_state
from dsmon.health import thresholds
from dsmon.load.playback import TimeShifter
from dsmon.model.records import EventRecord, Record
from dsmon.store.store import open_store
from ui.page import LOOK_S

#: The refresh period picked for these tests (``$DSMON_REFRESH_S``): unlike LOOK_S, so the two
#: timers are told apart.
REFRESH_S = 1.0
#: How an imported record that stops with no exit status is stated.
ENDED = "ended: the record ends without an exit status"


@pytest.fixture
def timers(monkeypatch: pytest.MonkeyPatch) -> Timers:
    """The page timers of the app the test opens."""
    return Timers(monkeypatch)


@pytest.fixture
def z2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, list[Record], list[Record]]:
    """An empty store for z2 (the app's store), and z2's records before and from step 15."""
    recs = read_records("z2", "z2")
    cut = next(i for i, r in enumerate(recs) if r.KIND == "timer" and r.step == 15)
    path = str(tmp_path / "s.sqlite")
    monkeypatch.setenv("DSMON_STORE", path)
    monkeypatch.setenv("DSMON_REFRESH_S", str(REFRESH_S))
    return path, recs[:cut], recs[cut:]


def add(path: str, recs: list[Record], *, live: bool) -> None:
    """Store records: ``live`` as a collector sends them, as they are written (their times
    moved to now, as the demo's playback moves them), else as ``dsmon import`` does."""
    with open_store(path) as store:
        store.add(TimeShifter().shift(recs, datetime.now()) if live else recs, live=live)


def opened(path: str, recs: list[Record], *, live: bool, **query: str) -> Any:
    """The Steps page of z2 opened on a store of ``recs`` (see :func:`add`)."""
    add(path, recs, live=live)
    at = app_at(path, "z2", "steps", **query)
    assert not at.exception
    return at


def sidebar(at: Any) -> tuple[list[str], bool]:
    """The run picker's entries and the "Live refresh" toggle, as the sidebar shows them."""
    return list(at.sidebar.selectbox[0].options), bool(at.sidebar.toggle[0].value)


def status(at: Any) -> str:
    """The status line the page draws with its body."""
    return next(c.value for c in at.caption if "rank(s) sent records" in c.value)


def test_a_finished_run_that_goes_on_comes_back_live_by_itself(
    z2: tuple[str, list[Record], list[Record]], timers: Timers
) -> None:
    path, before, after = z2
    at = opened(path, before, live=False)  # read from the log after the fact: finished
    assert sidebar(at) == (["z2 · imported"], False)
    # its record stops at step 14 with no exit status: so the state says, as of its end
    assert status(at).startswith(ENDED) and "incomplete; last step 14 · " in status(at)
    assert status(at).count("last step") == 1
    assert list(timers.every.values()) == [LOOK_S]  # only the look for new records
    look = next(iter(timers.every))

    timers.fire(at, LOOK_S)  # nothing new: the look redraws nothing
    assert timers.full_runs == 0 and not at.exception
    assert timers.every == {look: LOOK_S}

    going = [r for r in after if not (isinstance(r, EventRecord) and r.name == "worker_exit")]
    ends = [r for r in after if r not in going]
    add(path, going, live=True)  # DeepSpeed resumed from its checkpoint; the collector sends
    timers.fire(at, LOOK_S)
    assert timers.full_runs == 1 and not at.exception
    assert sidebar(at) == (["z2 · live"], True)
    assert status(at).startswith("training: step 30 · last step 30 · ")
    assert list(timers.every.values()) == [REFRESH_S]  # the live redraw, no more looks

    add(path, ends, live=True)  # the launcher's exit lines: the run has ended, live no more
    timers.fire(at, REFRESH_S)
    assert timers.full_runs == 1 and not at.exception
    assert sidebar(at) == (["z2 · finished"], False)  # written to a moment ago, but over
    assert status(at).startswith("finished: exit status 0 (the launcher: ")
    assert list(timers.every.values()) == [LOOK_S]


def test_a_live_run_that_stops_is_not_live_in_the_sidebar_too(
    z2: tuple[str, list[Record], list[Record]], timers: Timers, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, before, _ = z2
    at = opened(path, before, live=True)
    assert sidebar(at) == (["z2 · live"], True)
    assert list(timers.every.values()) == [REFRESH_S]

    timers.fire(at, REFRESH_S)  # still live: the body redraws, the frame stays
    assert timers.full_runs == 0 and status(at).startswith("training: step 14")

    # Nothing more is received: once the live window has passed, the page stops following
    # it; its state says it went silent (no end was witnessed: it is not called finished).
    monkeypatch.setattr(live_state, "LIVE_WINDOW_S", 0.5)
    monkeypatch.setattr(thresholds, "SILENT_AFTER_S", 0.5)
    time.sleep(0.6)
    timers.fire(at, REFRESH_S)
    assert timers.full_runs == 1 and not at.exception
    assert sidebar(at) == (["z2 · not live"], False)  # neither "finished" nor "live"
    # no end was witnessed: a run delivered live is silent, never called killed by a clock
    assert status(at).startswith("silent: no step for ")
    assert list(timers.every.values()) == [LOOK_S]  # it now looks for the run going on

    timers.fire(at, LOOK_S)  # and, with nothing new, redraws nothing: no rerun loop
    assert timers.full_runs == 0


@pytest.mark.parametrize(
    ("live", "switched", "label", "periods"),
    [
        (True, False, "z2 · live", []),  # off on a live run: no redraw and no look
        (False, True, "z2 · imported", [REFRESH_S]),  # on for a finished run: redraws
    ],
)
def test_the_users_live_refresh_switch_is_kept(
    z2: tuple[str, list[Record], list[Record]],
    timers: Timers,
    live: bool,
    switched: bool,
    label: str,
    periods: list[float],
) -> None:
    path, before, _ = z2
    at = opened(path, before, live=live)
    at.sidebar.toggle[0].set_value(switched).run()
    assert not at.exception
    assert sidebar(at) == ([label], switched)
    assert list(timers.every.values()) == periods
    if periods:  # the run is as it was: the redraw leaves the frame, and the switch, alone
        timers.fire(at, REFRESH_S)
        assert timers.full_runs == 0 and status(at).startswith(ENDED)


def test_a_replayed_step_is_not_left_for_new_records(
    z2: tuple[str, list[Record], list[Record]], timers: Timers
) -> None:
    at = opened(z2[0], z2[1], live=False, step="10")
    assert at.sidebar.slider[0].value == 10
    assert timers.every == {}


def test_a_crash_seen_live_is_named_in_the_picker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run sent live whose crash the launcher reported is "crashed", not "finished"."""
    path = str(tmp_path / "s.sqlite")
    monkeypatch.setenv("DSMON_STORE", path)
    add(path, read_records("events_crash_step17", "crash"), live=True)
    at = app_at(path, "crash", "steps")
    assert not at.exception
    assert status(at).startswith("crashed: ")
    assert sidebar(at) == (["crash · crashed"], False)
