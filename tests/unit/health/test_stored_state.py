"""The state of a stored run, read from the store's bookkeeping and the timers' pages.

``dsmon import``'s summary judges the run's state from the store (``stored_state``). It reads
each kind's newest time and highest step from the bookkeeping (``Store.kind_stats``) and the
timers' breakdown and times page by page, never the whole timer frame: these tests hold it
to what the whole frames say, on real runs.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from lanes import first_fast
from locations import DATA

from dsmon.analysis.steps import step_breakdown
from dsmon.health.gather import (
    FRAME_KINDS,
    inputs_from_store,
    paged_timer_views,
    store_kind_stamps,
)
from dsmon.health.inputs import BREAKDOWN, KIND_STAMPS, TIMER_TIMES, HealthInputs
from dsmon.health.run_state import judge, stored_state
from dsmon.load.files import import_paths
from dsmon.store.store import Store, open_store

#: Real runs: timed and untimed timer lines (the default log level), sparse step lines,
#: gradient accumulation, the probe, a crash, a hang, the Trainer's dicts, Megatron's lines.
RUNS = (
    "verdict_healthy",
    "z0_default_loglevel",
    "sparse_step_lines",
    "grad_accum",
    "probe_straggler",
    "events_crash_step17",
    "verdict_hang_then_kill",
    "hf_trainer_timers",
    "megatron_ds095_llama",
    "python_default_loglevel",
)


def stored(folder: str, tmp_path: Path) -> Store:
    store = open_store(tmp_path / "s.sqlite")
    import_paths(store, [DATA / folder], run="run")
    return store


def whole_frames(store: Store) -> HealthInputs:
    """The run's inputs with every frame read whole: no bookkeeping, no paged views."""
    inputs = inputs_from_store(store, "run")
    frames = {k: inputs.frames[k] for k in inputs.frames if k != KIND_STAMPS}
    return HealthInputs(config=inputs.config, facts=inputs.facts, frames=frames, run="run")


@pytest.mark.parametrize("folder", first_fast(RUNS))
def test_stamps_are_the_frames_maxima(folder: str, tmp_path: Path) -> None:
    with stored(folder, tmp_path) as store:
        stamps = store_kind_stamps(store, "run")
        kinds = [k for k in FRAME_KINDS if k not in ("rank_step", "heartbeat")]
        for kind in kinds:
            frame = store.frames.frame("run", kind)
            if frame.empty:
                assert kind not in stamps.index
                continue
            for column in ("ts", "step"):
                top = frame[column].max()
                kept = stamps.loc[kind, column]
                assert (pd.isna(top) and pd.isna(kept)) or top == kept, (kind, column)


@pytest.mark.parametrize("folder", first_fast(RUNS))
def test_paged_views_are_the_whole_frames(folder: str, tmp_path: Path) -> None:
    with stored(folder, tmp_path) as store:
        views = paged_timer_views(store, "run")
        timer = store.frames.frame("run", "timer")
        breakdown = step_breakdown(timer)
        totals = breakdown[["step", "rank", "total_ms"]]
        pd.testing.assert_frame_equal(views[BREAKDOWN](), totals)
        if not timer.empty:
            times = timer[["ts", "step"]].reset_index(drop=True)
            pd.testing.assert_frame_equal(views[TIMER_TIMES](), times)


@pytest.mark.parametrize("folder", first_fast(RUNS))
def test_stored_state_is_the_whole_frames_state(folder: str, tmp_path: Path) -> None:
    with stored(folder, tmp_path) as store:
        assert stored_state(store, "run").line() == judge(whole_frames(store)).line()


def test_stored_state_never_reads_the_timer_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 500 MB log's timer frame alone took most of ``dsmon import``'s 1.2 GB peak."""
    with stored("z0_default_loglevel", tmp_path) as store:
        expected = judge(whole_frames(store)).line()
        read = store.frames.frame

        def refuse_timers(run: str, kind: str, **kw: object) -> pd.DataFrame:
            assert kind not in ("timer", "step", "throughput", "iteration"), kind
            return read(run, kind, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(store.frames, "frame", refuse_timers)
        assert stored_state(store, "run").line() == expected
