"""Step and rank counts of a breakdown, taken without hashing when rows are one per step.

Held to ``nunique`` and ``unique`` on every real run in ``tests/data``, in the order the
breakdown comes and shuffled (which takes the general path).
"""

from __future__ import annotations

import pandas as pd
import pytest
from lanes import sampled
from locations import DATA
from shared_fixtures import read_log

from dsmon.analysis import steps
from dsmon.model.frames import records_frame

RUNS = sorted(p.name for p in DATA.iterdir() if (p / "train.log").exists())


@pytest.mark.parametrize("name", sampled(RUNS))
def test_counts_equal_pandas_on_real_runs(name: str) -> None:
    bd = steps.step_breakdown(records_frame("timer", read_log(DATA / name / "train.log", name)))
    for frame in (bd, bd.sample(frac=1.0, random_state=3)):
        assert steps.timed_steps(frame) == (frame["step"].nunique() if not frame.empty else 0)
        expected = sorted(int(r) for r in frame["rank"].dropna().unique()) if len(frame) else []
        assert steps.ranks_of(frame) == expected


def test_several_ranks_and_repeated_steps() -> None:
    bd = pd.DataFrame(
        {
            "step": pd.array([1, 1, 2, 2, 3, None], dtype="Int64"),
            "rank": pd.array([1, 0, 0, 1, None, 3], dtype="Int64"),
        }
    )
    assert steps.timed_steps(bd) == 3
    assert steps.ranks_of(bd) == [0, 1, 3]
