"""Packed blocks (``dsmon.store.blocks``): what a reader unpacks is what the rows say.

Times are the column a reader once parsed from text, block by block: plain times (the
probe's) are packed as microseconds and must unpack to what pandas reads of their text, to
the microsecond and in pandas' own unit; any other time keeps its text.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dsmon.store import blocks

KINDS = blocks.INT + blocks.FLOAT + blocks.TIME


def parsed(texts: list[str | None]) -> pd.Series:
    """What the per-rank tables make of fetched rows' times (``ranks.tables._times``)."""
    return pd.to_datetime(pd.Series(texts, dtype=object), errors="coerce", format="ISO8601")


def test_plain_times_unpack_as_pandas_reads_their_text() -> None:
    texts = [
        "2026-11-29T08:00:00.800", None, "2026-11-29 08:00:01", "2026-11-29T08:00",
        "2026-11-29", "2026-11-29T23:59:59.123456", "1969-12-31T23:59:59.5",
        "2026-11-29T08:00:00.8",
    ]  # fmt: skip
    rows = [(i, float(i) if i % 3 else None, t) for i, t in enumerate(texts)]
    ints, floats, times = blocks.unpack(blocks.pack(rows, KINDS), KINDS)
    assert ints.tolist() == list(range(len(texts)))
    assert np.isnan(floats[0]) and floats[1] == 1.0
    assert isinstance(times, np.ndarray) and times.dtype == np.dtype("M8[us]")
    want = parsed(texts)
    assert want.dtype == times.dtype  # the unit pandas gives these texts
    pd.testing.assert_series_equal(pd.Series(times), want)


def test_a_block_with_a_time_not_plain_keeps_its_text() -> None:
    """A zone (or nanoseconds) is not packed as microseconds: the reader parses the text."""
    for odd in ("2026-11-29T08:00:00.800+02:00", "2026-11-29T08:00:00.123456789"):
        texts = ["2026-11-29T08:00:00.000", odd, None]
        rows = [(i, 0.0, t) for i, t in enumerate(texts)]
        times = blocks.unpack(blocks.pack(rows, KINDS), KINDS)[2]
        assert times == texts


def test_an_empty_block_unpacks_empty() -> None:
    ints, floats, times = blocks.unpack(blocks.pack([], KINDS), KINDS)
    assert len(ints) == len(floats) == len(times) == 0


def test_joined_parts_equal_the_parts_frames_joined() -> None:
    """Blocks and fetched rows joined once: the frame pandas makes of the parts' frames."""
    plain = ["2026-11-29T08:00:00.800", "2026-11-29T08:00:01.600"]
    parts = [
        dict(zip("kxt", blocks.unpack(blocks.pack([(1, 0.5, plain[0]), (2, None, plain[1])],
                                                   KINDS), KINDS), strict=True)),
        {"k": np.array([3]), "x": np.array([2.5]), "t": parsed(["2026-11-29T08:00:02"])},
        {"k": np.array([], dtype=np.int64), "x": np.array([]), "t": parsed([])},
        {"k": np.array([4]), "x": np.array([np.nan]), "t": parsed([None]).to_numpy()},
    ]  # fmt: skip
    got = blocks.joined(parts, "kxt")
    want = pd.concat([pd.DataFrame(p) for p in parts if len(p["k"])], ignore_index=True)
    pd.testing.assert_frame_equal(got, want)
