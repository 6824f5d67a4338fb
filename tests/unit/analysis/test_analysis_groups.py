"""Rows grouped on numpy codes (``dsmon.analysis.groups``) against pandas' own group-by.

The dashboard groups traces this way because it is faster; these tests hold it to what
``groupby(sort=True, dropna=False)`` and ``idxmax`` answer, on frames with string, nullable
integer and float keys, missing keys and missing steps.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from lanes import examples

from dsmon.analysis import groups

NAMES = st.sampled_from(["loss", "learning rate", "samples/s", "ä", None])
RANKS = st.sampled_from([0, 1, 7, None])
STEPS = st.one_of(st.none(), st.integers(0, 40))


def _frame(rows: list[tuple[str | None, int | None, int | None]]) -> pd.DataFrame:
    names, ranks, steps = zip(*rows, strict=True) if rows else ((), (), ())
    return pd.DataFrame(
        {
            "metric": pd.Series(names, dtype="str"),
            "rank": pd.array(ranks, dtype="Int64"),
            "step": pd.array(steps, dtype="Float64"),
            "value": np.arange(len(rows), dtype=np.float64),
            # categories unsorted and partly unused, as a union of parts leaves them
            "label": pd.Categorical(
                names, categories=["samples/s", "zz", "loss", "learning rate", "ä"]
            ),
        }
    )


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(NAMES, RANKS, STEPS), min_size=1, max_size=60))
def test_positions_are_pandas_groups_in_key_order(rows: list) -> None:
    frame = _frame(rows)
    for cols in (["metric"], ["rank"], ["metric", "rank"], ["rank", "metric"], ["label", "rank"]):
        expected = [
            g.index.to_numpy()
            for _, g in frame.groupby(
                cols if len(cols) > 1 else cols[0], dropna=False, observed=True
            )
        ]
        got = groups.positions(frame, cols)
        assert [list(p) for p in got] == [list(p) for p in expected], cols


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(NAMES, RANKS, STEPS), min_size=1, max_size=60))
def test_newest_is_idxmax_with_ties_to_the_later_row(rows: list) -> None:
    frame = _frame(rows)
    cols = ["metric", "rank"]
    expected = []
    for _, g in frame.groupby(cols, dropna=True):
        steps = g["step"].astype("float64")
        if steps.notna().any():
            expected.append(int(g.index[steps == steps.max()][-1]))
    assert sorted(groups.newest(frame, cols, "step").tolist()) == sorted(expected)


def test_string_keys_sort_as_pandas_sorts_them() -> None:
    frame = pd.DataFrame({"k": pd.Series(["b", "B", None, "a", "é", "b"], dtype="str")})
    got = [frame["k"].iloc[p[0]] for p in groups.positions(frame, ["k"])]
    expected = [k for k, _ in frame.groupby("k", dropna=False)]
    assert [g if isinstance(g, str) else None for g in got] == [
        e if isinstance(e, str) else None for e in expected
    ]
