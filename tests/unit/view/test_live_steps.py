"""Live mode: records reach the store at once, and get their step when the log names it.

DeepSpeed's default log level (0.17.6 and later) hides the INFO lines that carry step numbers,
and a collector may start reading in the middle of a run. A live parser must not hold records
back until a step is known: it sends them at once without a step, and again with it once the
clock resolves; the store fills the step in place and readers reload.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from locations import DATA

from dsmon.health.live import is_live, run_is_live
from dsmon.model.records import Record, TimerRecord, record_key
from dsmon.parse.log import LogParser
from dsmon.store.store import Store
from dsmon.view.cache import RunFrames


def z2_tail() -> tuple[list[str], int]:
    """The z2 log from step 12's ground-truth line on; index of its first ``step=`` anchor."""
    lines = (DATA / "z2" / "train.log").read_text(encoding="utf-8").splitlines()
    start = next(i for i, ln in enumerate(lines) if "[train.py] step 12 " in ln)
    tail = lines[start:]
    return tail, next(i for i, ln in enumerate(tail) if "step=15," in ln)


def offline(lines: list[str]) -> list[Record]:
    return list(LogParser("r", "train.log").feed_lines(lines))


def test_live_parser_sends_timers_before_any_anchor_then_again_with_steps() -> None:
    tail, anchor = z2_tail()
    parser = LogParser("r", "train.log", live=True)
    early = [rec for raw in tail[:anchor] for rec in parser.feed(raw)]
    early_timers = [r for r in early if isinstance(r, TimerRecord)]
    assert early_timers, "live mode must not hold timer records back"
    assert {r.step for r in early_timers} == {None}
    later = [rec for raw in tail[anchor:] for rec in parser.feed(raw)] + parser.finish()
    again = {
        record_key(r): r.step for r in later if record_key(r) in {record_key(e) for e in early}
    }
    # every early timer comes again, with the step the offline parser gives it
    truth = {record_key(r): r.step for r in offline(tail)}
    assert {record_key(r) for r in early_timers} <= set(again)
    for key, step in again.items():
        assert step is not None and step == truth[key]
    assert [again[record_key(r)] for r in early_timers if r.group == "global"] == [13, 14]


def test_live_parser_without_any_anchor_sends_everything_unnumbered_at_once() -> None:
    lines = (DATA / "z0_default_loglevel" / "train.log").read_text(encoding="utf-8").splitlines()
    tail = lines[60:]  # after the launcher lines: no start, no anchor in what is left
    parser = LogParser("r", "train.log", live=True)
    sent = [rec for raw in tail[:60] for rec in parser.feed(raw)]
    timers = [r for r in sent if isinstance(r, TimerRecord)]
    assert len(timers) >= 10 and {r.step for r in timers} == {None}


def test_store_fills_a_missing_step_and_readers_reload(store: Store) -> None:
    tail, anchor = z2_tail()
    parser = LogParser("r", "train.log", live=True)
    early = [rec for raw in tail[:anchor] for rec in parser.feed(raw)]
    store.add(early)
    frames = RunFrames(store, "r")
    before = frames.frame("timer")
    assert len(before) > 0 and before["step"].isna().all()
    assert store.restamps("r") == 0
    rest = [rec for raw in tail[anchor:] for rec in parser.feed(raw)] + parser.finish()
    store.add(rest)
    assert store.restamps("r") > 0
    assert frames.refresh() is True
    after = frames.frame("timer")
    want = sorted(r.step for r in offline(tail) if isinstance(r, TimerRecord))
    assert sorted(after["step"].tolist()) == want  # each record once, all numbered
    assert store.runs()[0].last_step == 30
    # a copy without a step never erases a step already stored
    store.add(early)
    assert store.frames.frame("r", "timer")["step"].notna().all()


def test_a_run_received_now_is_live_though_its_lines_are_old(store: Store) -> None:
    """Timer lines carry no timestamp: a run is live while a live sender stores its records."""
    tail, anchor = z2_tail()
    recs = offline(tail)
    store.add(recs[: len(recs) // 2])  # an import: not live, its stamps are of 2026-11-29
    (info,) = store.runs()
    now = datetime.now()
    assert info.received_at is None and not run_is_live(info, now)
    store.add(recs[len(recs) // 2 :], live=True)  # as the ingest server stores a batch
    (info,) = store.runs()
    assert info.received_at is not None and run_is_live(info, now)
    assert not is_live(info.last_ts, now)  # the records' own stamps say otherwise
    assert not run_is_live(info, now + timedelta(minutes=10))
