"""A replay position shows nothing printed after its step: a worker's traceback included.

A traceback's lines have no time of their own: the event carries the last stamped line's
time, which says only that it came later. tests/data/events_crash_rank1_step17 (real,
DeepSpeed 0.19.8): rank 1 raises at step 17, rank 0 then fails on the broken connection, and
the launcher's ``Killing subprocess`` lines (stamped 14:16:24) come after both tracebacks.
"""

from __future__ import annotations

import pandas as pd
from dashboard_support import read_records

from dsmon.model.frames import records_frame
from dsmon.model.records import UNSTAMPED
from dsmon.view.cutoff import OPEN, Cutoff, step_cutoff


def events() -> pd.DataFrame:
    recs = [r for r in read_records("events_crash_rank1_step17", "c") if r.KIND == "event"]
    return records_frame("event", recs)


def names(frame: pd.DataFrame) -> list[str]:
    return list(frame["name"])


def test_a_traceback_is_not_shown_before_the_launcher_line_after_it() -> None:
    ev = events()
    tracebacks = ev[ev["name"] == "traceback"]
    assert len(tracebacks) == 2
    assert all(d.get(UNSTAMPED) for d in tracebacks["detail"])
    carried = pd.Timestamp(tracebacks["ts"].max())  # the last stamped line's time before them
    killed = pd.Timestamp(ev.loc[ev["name"] == "worker_exit", "ts"].min())
    assert carried < killed
    # as of a time after the carried one but before the launcher's reaction: not shown
    early = Cutoff(step=16, ts=carried + (killed - carried) / 2)
    assert "traceback" not in names(early.apply(ev))
    assert "world_info" in names(early.apply(ev))  # what was printed then still is
    # as of the launcher's reaction, they had been printed
    late = Cutoff(step=17, ts=killed)
    assert names(late.apply(ev)).count("traceback") == 2
    assert names(OPEN.apply(ev)).count("traceback") == 2


def test_an_unbounded_traceback_is_shown_only_as_the_run_stands() -> None:
    ev = events()
    cut = ev[ev["name"] != "worker_exit"]  # the log ends with the tracebacks
    assert "traceback" not in names(Cutoff(step=17, ts=pd.Timestamp("2100-01-01")).apply(cut))
    assert "traceback" not in names(Cutoff(step=17).apply(cut))
    assert names(OPEN.apply(cut)).count("traceback") == 2


def test_a_stamped_failure_keeps_its_own_time() -> None:
    ev = events()
    row = ev[ev["name"] == "traceback"].index[0]
    stamped = ev.copy()
    stamped.at[row, "detail"] = {k: v for k, v in ev.at[row, "detail"].items() if k != UNSTAMPED}
    at = pd.Timestamp(stamped.at[row, "ts"])
    assert names(Cutoff(step=5, ts=at).apply(stamped)).count("traceback") == 1


def test_a_stop_printed_after_the_position_is_not_shown() -> None:
    """tests/data/events_sigint_python and events_sigint_deepspeed, real jobs stopped by
    Ctrl-C: a worker's ``KeyboardInterrupt`` has no time of its own either. It carried the
    first stamped line's time, so a replay at step 3 already read "stopped from outside"."""
    for folder, bounded in (("events_sigint_python", False), ("events_sigint_deepspeed", True)):
        recs = read_records(folder, "s")
        ev = records_frame("event", [r for r in recs if r.KIND == "event"])
        timers = records_frame("timer", [r for r in recs if r.KIND == "timer"])
        at_3 = step_cutoff(timers, 3)
        interrupts = ev[ev["name"] == "signalled"]
        unstamped = [bool(d.get(UNSTAMPED)) for d in interrupts["detail"]]
        assert unstamped.count(True) >= 1, folder  # the KeyboardInterrupt tracebacks
        assert "signalled" not in names(at_3.apply(ev)), folder
        # as the run stands (or once the launcher's own stamped line came), they are shown
        shown = names(OPEN.apply(ev)).count("signalled")
        assert shown == len(interrupts), folder
        if bounded:  # the launcher's "Main process received SIGINT" (line 115) bounds those
            # before it: the ranks' (lines 69, 113) and itself; the `deepspeed` command's own
            # KeyboardInterrupt (line 130) comes after the last stamped line
            end = Cutoff(step=10**6, ts=pd.Timestamp(ev["ts"].max()))
            kept = end.apply(ev)
            assert list(kept.loc[kept["name"] == "signalled", "line"]) == [69, 113, 115], folder
