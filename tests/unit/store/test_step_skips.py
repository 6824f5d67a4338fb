"""The store's newest skipped-step count per run against the step lines it summarises.

Real runs of tests/data (fp16 runs that skip steps, a relaunch whose steps come twice) are
stored at once, a few records at a time and shuffled, on both backends; the store's answer
(``Store.skips``) must be the last row of ``dsmon.analysis.steps.skipped_counts`` of the run's
whole step frame, which the skipped-steps rule reads.
"""

from __future__ import annotations

import random

import pytest
from store_support import add_in_batches, folder_records

from dsmon.analysis import steps
from dsmon.store.store import Store

RUN = "r"
FOLDERS = (
    "fp16_zero2",
    "fp16_zero0",
    "events_relaunch_after_crash",
    "z2",
    "loss_scale_old_versions",
)


def assert_newest_matches(store: Store) -> None:
    rows = steps.skipped_counts(store.frames.frame(RUN, "step"))
    want = None if rows.empty else (int(rows.iloc[-1]["step"]), float(rows.iloc[-1]["skipped"]))
    assert store.skips.newest(RUN) == want


@pytest.mark.parametrize("folder", FOLDERS)
def test_newest_skipped_count_of_a_run_stored_in_any_order(folder: str, store: Store) -> None:
    recs = folder_records(folder, RUN)
    shuffled = list(recs)
    random.Random(3).shuffle(shuffled)
    add_in_batches(store, shuffled, 11)
    assert_newest_matches(store)
    store.add(recs)  # again, in order: nothing changes
    assert_newest_matches(store)
