"""Communication share and per-op tables on real runs.

z2 (tests/data/z2/train.log): exposed comm = bwd_allreduce + optimizer_allgather of each step.
comms_logger / comms_logger_verbose (tests/data/, copied whole from the corpus): the
``log_summary()`` table and the verbose ``comm op:`` lines; totals below were added up by hand
from those files.
"""

from __future__ import annotations

import pandas as pd
import pytest
from shared_fixtures import DATA, read_log

from dsmon.analysis.comm import (
    COMM_OPS_COLUMNS,
    COMM_SHARE_COLUMNS,
    comm_ops,
    comm_share,
)
from dsmon.analysis.steps import max_per_step, step_breakdown
from dsmon.model.frames import records_frame
from dsmon.model.records import Record


@pytest.fixture(scope="module")
def share(z2_log_records: list[Record]) -> pd.DataFrame:
    timers = records_frame("timer", [r for r in z2_log_records if r.KIND == "timer"])
    return comm_share(step_breakdown(timers))


def test_comm_share_of_z2(share: pd.DataFrame) -> None:
    assert list(share.columns) == list(COMM_SHARE_COLUMNS)
    assert len(share) == 30
    first = share.iloc[0]
    # step 1: bwd_allreduce 78.63 + optimizer_allgather 11.76 of 350.75 + 754.18 + 190.22
    assert first["exposed_comm_ms"] == pytest.approx(90.39)
    assert first["comm_share"] == pytest.approx(90.39 / 1295.15)
    assert share["comm_share"].median() == pytest.approx(0.2389159, abs=1e-6)


def _frame(name: str, kind: str) -> pd.DataFrame:
    recs = read_log(DATA / name / "train.log", name)
    return records_frame(kind, [r for r in recs if kind == r.KIND])


def test_comm_ops_from_summary_table() -> None:
    ops = comm_ops(_frame("comms_logger", "comm_summary")).set_index("op")
    assert list(ops.reset_index().columns) == list(COMM_OPS_COLUMNS)
    assert sorted(ops.index) == ["all_gather_into_tensor", "all_reduce", "broadcast"]
    ar = ops.loc["all_reduce"]
    # all_reduce rows: 4.0 B x 20 (1559.64 ms, busbw 0.00) and 3.56 MB x 20 (1536.33 ms, busbw 0.47)
    assert ar["count"] == 40
    assert ar["total_latency_ms"] == pytest.approx(1559.64 + 1536.33)
    assert ar["avg_latency_ms"] == pytest.approx((1559.64 + 1536.33) / 40)
    assert ar["busbw_gbps"] == pytest.approx(0.235)
    assert ar["algbw_gbps"] == pytest.approx(0.47)
    assert ar["total_bytes"] == pytest.approx(20 * 4 + 20 * 3.56 * 2**20, rel=1e-3)
    bc = ops.loc["broadcast"]
    assert bc["count"] == 26 + 4 + 4 + 1 + 4 + 4 + 10
    assert bc["total_latency_ms"] == pytest.approx(
        220.48 + 29.53 + 36.10 + 1.13 + 30.94 + 28.87 + 89.21
    )


def test_comm_ops_from_verbose_lines() -> None:
    ops = comm_ops(_frame("comms_logger_verbose", "comm_op")).set_index("op")
    # 80 "comm op:" lines: broadcast 53, all_reduce 16, all_gather_into_tensor 8, barrier 1
    # (log_summary_barrier, the logger's own barrier, is left out)
    assert ops["count"].to_dict() == {
        "all_gather_into_tensor": 8,
        "all_reduce": 16,
        "barrier": 1,
        "broadcast": 53,
    }
    assert ops.loc["all_reduce", "total_latency_ms"] == pytest.approx(510.73)
    assert ops.loc["broadcast", "total_latency_ms"] == pytest.approx(544.06)


def test_empty_inputs() -> None:
    assert comm_ops(pd.DataFrame()).empty
    assert comm_share(pd.DataFrame()).empty


def test_max_per_step_without_grouping_equals_the_group_by(z2_log_records: list[Record]) -> None:
    """One row per step (rank 0's timers) takes the short way; two ranks' rows group."""
    bd = step_breakdown(records_frame("timer", [r for r in z2_log_records if r.KIND == "timer"]))
    assert bd["step"].is_unique and len(bd) > 10
    two = pd.concat([bd, bd.assign(rank=1, total_ms=bd["total_ms"] * 2)]).sort_values("step")
    for rows in (bd, two, bd.iloc[::-1]):
        pd.testing.assert_series_equal(
            max_per_step(rows, "total_ms"), rows.groupby("step")["total_ms"].max().astype("float64")
        )
