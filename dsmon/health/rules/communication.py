"""Runtime rules on communication, from the run's own records.

Each rule states what its numbers can and cannot see. The engine timers only measure the
communication a step waits for (with overlap_comm on, ``bwd_allreduce`` is the exposed tail;
ZeRO-3 all-gathers hide inside fwd/bwd), and the comms logger synchronizes after every
collective, so it distorts the overlap it is asked to measure. The summaries say so next to
the figures, as the dashboard's communication page does.
"""

from __future__ import annotations

import pandas as pd

from dsmon.analysis import comm, step_stats
from dsmon.health import measures as m
from dsmon.health import thresholds as th
from dsmon.health.inputs import HealthInputs
from dsmon.health.model import Evidence, Finding, Status, percent
from dsmon.health.registry import rule
from dsmon.health.verdicts import fix_json

_NO_TIMERS = (
    "no engine timer lines: turn on wall_clock_breakdown (see observe.wall_clock_breakdown)"
)
_NO_COMMS = "no comms-logger output: add a comms_logger section for one diagnostic run"
_EXPOSED = (
    "timers measure exposed communication only (bwd_allreduce, + optimizer_allgather on "
    "ZeRO-1/2): what overlap_comm hides and ZeRO-3's all-gathers inside fwd/bwd are not counted"
)


def _overlap_setting(inputs: HealthInputs) -> Evidence:
    """The configured overlap_comm, for evidence next to measured communication."""
    if inputs.config is None:
        return Evidence("zero_optimization.overlap_comm", "unknown", "no config")
    return Evidence.of(inputs.config.get("zero_optimization.overlap_comm"))


@rule(
    "comm.share",
    f"Communication takes at most {percent(th.COMM_SHARE_WARN)} of a step",
    "Exposed communication (bwd_allreduce, + optimizer_allgather on ZeRO-1/2) as a share of "
    "fwd + bwd + step, per step, median over the run after warm-up (target: under "
    f"{percent(th.COMM_SHARE_WARN)}).",
    "runtime",
    page="communication",
)
def check_comm_share(inputs: HealthInputs) -> Finding:
    """Median exposed-communication share against COMM_SHARE_WARN and COMM_SHARE_FAIL."""
    bd = m.breakdown(inputs)
    if bd.empty:
        return Finding(Status.UNKNOWN, _NO_TIMERS)
    stats = step_stats.share_stats(m.stat(inputs, step_stats.COMM_SHARE))
    if stats is None:
        return Finding(Status.UNKNOWN, "the timer lines carry no bwd_allreduce figure")
    rng = _shared_steps(bd)
    med, p90 = stats.p50, stats.p90
    where = f"{m.range_text(rng)}, slowest rank"
    exposed = m.stat(inputs, step_stats.EXPOSED_COMM_MS).median()
    total = m.stat(inputs, step_stats.STEP_TOTAL_MS).median()
    ev = (
        Evidence("exposed comm share p50", f"{med:.1%}", where),
        Evidence("exposed comm share p90", f"{p90:.1%}", where),
        Evidence("exposed comm p50", f"{exposed:.2f} ms", where),
        Evidence("step total p50", f"{total:.2f} ms", where),
        _overlap_setting(inputs),
    )
    if med <= th.COMM_SHARE_WARN:
        return Finding(
            Status.PASS, f"communication is {med:.1%} of a step; {_EXPOSED}", ev, steps=rng
        )
    status = Status.FAIL if med > th.COMM_SHARE_FAIL else Status.WARN
    fix = fix_json(
        {
            "zero_optimization": {
                "overlap_comm": True,
                "reduce_bucket_size": int(th.BUCKET_MAX),
                "allgather_bucket_size": int(th.BUCKET_MAX),
            }
        }
    )
    return Finding(
        status,
        f"communication is {med:.1%} of a step (> {th.COMM_SHARE_WARN:.0%}); {_EXPOSED}",
        ev,
        fix,
        steps=rng,
    )


def _shared_steps(bd: pd.DataFrame, part: int = 1024) -> tuple[int, int] | None:
    """First and last step of the rows whose communication share is known.

    Read from each end a part at a time when the rows are in step order (a breakdown is):
    a run of a million steps has its share known at both ends, so this reads two parts,
    not every row.
    """
    if not bd["step"].is_monotonic_increasing:
        return m.step_range(_known_share(bd))
    first = last = None
    for start in range(0, len(bd), part):
        first = m.step_range(_known_share(bd.iloc[start : start + part]))
        if first is not None:
            break
    for stop in range(len(bd), 0, -part):
        last = m.step_range(_known_share(bd.iloc[max(0, stop - part) : stop]))
        if last is not None:
            break
    return (first[0], last[1]) if first is not None and last is not None else None


def _known_share(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows' :func:`comm.comm_share` where the share is known."""
    shares = comm.comm_share(rows)
    return shares[shares["comm_share"].notna()]


def _phase_shares(
    inputs: HealthInputs, bd: pd.DataFrame, notes: list[Evidence]
) -> list[tuple[str, float, str]]:
    """(label, share, source) for all-gather vs fwd and reduction vs bwd."""
    out: list[tuple[str, float, str]] = []
    bd_all = m.all_steps(inputs)
    ops, distrust = m.trusted_comm_ops(inputs, bd_all)
    if distrust:
        notes.append(Evidence("comms logger", "ignored", distrust))
    gather = m.op_latency_ms(ops, ("all_gather",))
    reduce = m.op_latency_ms(ops, ("reduce_scatter", "all_reduce"))
    if gather is None and reduce is None:  # no logger: the timers alone (no sums over the run)
        return _timer_phase_shares(inputs)
    fwd, bwd = m.per_step(bd_all, "fwd_ms").sum(), m.per_step(bd_all, "bwd_ms").sum()
    src = "comms logger total latency / summed timers"
    if gather is not None and fwd > 0:
        out.append(("all-gather share of fwd", gather / fwd, src))
    if reduce is not None and bwd > 0:
        out.append(("reduce-scatter/all-reduce share of bwd", reduce / bwd, src))
    return out or _timer_phase_shares(inputs)


def _timer_phase_shares(inputs: HealthInputs) -> list[tuple[str, float, str]]:
    """Phase shares from the timers alone (exposed communication only)."""
    out: list[tuple[str, float, str]] = []
    bwd_share = step_stats.share_stats(m.stat(inputs, step_stats.ALLREDUCE_OF_BWD))
    if bwd_share is not None:
        out.append(("bwd_allreduce share of bwd", bwd_share.p50, "timers, median over steps"))
    gather = step_stats.share_stats(m.stat(inputs, "pct.allgather_pct_of_fwd"), 100.0)
    if gather is not None:
        out.append(("optimizer_allgather vs fwd", gather.p50, "ZeRO-1/2 timers, median over steps"))
    return out


@rule(
    "comm.phase_share",
    f"All-gather and reduction stay under {percent(th.PHASE_COMM_SHARE_WARN)} of their phase",
    "All-gather time against fwd and reduce-scatter/all-reduce time against bwd (read as "
    "'allgather = 60 ms (24 % of fwd)'), from the comms logger when present, else from the "
    "timers.",
    "runtime",
    page="communication",
)
def check_phase_share(inputs: HealthInputs) -> Finding:
    """Warn when either collective family exceeds PHASE_COMM_SHARE_WARN of its phase."""
    bd = m.breakdown(inputs)
    if bd.empty:
        return Finding(Status.UNKNOWN, _NO_TIMERS)
    notes: list[Evidence] = []
    shares = _phase_shares(inputs, bd, notes)
    if not shares:
        return Finding(
            Status.UNKNOWN, "no communication figure per phase in timers or logger", tuple(notes)
        )
    rng = m.step_range(bd)
    ev = tuple(notes) + tuple(
        Evidence(label, f"{v:.1%}", f"{src}, {m.range_text(rng)}") for label, v, src in shares
    )
    high = [f"{label} {v:.1%}" for label, v, _ in shares if v > th.PHASE_COMM_SHARE_WARN]
    zero3 = inputs.config is not None and inputs.config.stage == 3
    bucket = "stage3_prefetch_bucket_size" if zero3 else "allgather_bucket_size"
    fix = fix_json(
        {
            "zero_optimization": {
                "overlap_comm": True,
                "reduce_bucket_size": int(th.BUCKET_MAX),
                bucket: int(th.PREFETCH_BUCKET_DEFAULT if zero3 else th.BUCKET_MAX),
            }
        }
    )
    if not high:
        return Finding(
            Status.PASS,
            f"each phase's communication is within {percent(th.PHASE_COMM_SHARE_WARN)}",
            ev,
            steps=rng,
        )
    return Finding(
        Status.WARN,
        "; ".join(high) + f" (> {percent(th.PHASE_COMM_SHARE_WARN)})",
        ev,
        fix,
        steps=rng,
    )


class _UntrustedCommsError(Exception):
    """The comms logger's figures failed the wall-time sanity check (message says why)."""


def _overlap(
    inputs: HealthInputs, bd: pd.DataFrame
) -> tuple[float, float, float, float, str] | None:
    """(overlap, compute, comm, step ms) per step median, and how comm was measured."""
    per = comm.step_overlap(bd, inputs.frame("comm_op")).dropna(subset=["overlap"])
    if not per.empty:
        return (
            m.median(per["overlap"]),
            m.median(per["compute_ms"]),
            m.median(per["comm_ms"]),
            m.median(per["step_ms"]),
            "verbose comms-logger lines, per step",
        )
    bd_all = m.all_steps(inputs)
    ops, distrust = m.trusted_comm_ops(inputs, bd_all)
    if distrust:
        raise _UntrustedCommsError(distrust)
    total = m.op_latency_ms(ops, m.TRAINING_OPS)
    if total is None:  # no logger: no step count either (a pass over every row)
        return None
    n = bd_all["step"].nunique()
    if n == 0:
        return None
    compute = m.median(
        m.per_step(bd, "fwd_ms") + m.per_step(bd, "bwd_inner_ms") + m.per_step(bd, "step_ms")
    )
    comm_ms, step_ms = total / n, m.median(m.per_step(bd, "total_ms"))
    smaller = min(compute, comm_ms)
    if not smaller > 0:
        return None
    value = min(1.0, max(0.0, (compute + comm_ms - step_ms) / smaller))
    return value, compute, comm_ms, step_ms, f"comms-logger summary spread over {n} steps"


@rule(
    "comm.overlap",
    "Communication overlaps computation in practice",
    "Overlap = (T_compute + T_comm - T_step) / min(T_compute, T_comm): 1 when the step takes "
    "max(compute, comm), 0 when it takes their sum. Needs the comms logger for T_comm.",
    "runtime",
    page="communication",
)
def check_overlap(inputs: HealthInputs) -> Finding:
    """Warn when steps take close to compute + comm instead of their max."""
    bd = m.breakdown(inputs)
    if bd.empty:
        return Finding(Status.UNKNOWN, _NO_TIMERS)
    try:
        got = _overlap(inputs, bd)
    except _UntrustedCommsError as exc:
        return Finding(Status.UNKNOWN, str(exc))
    if got is None:
        return Finding(Status.UNKNOWN, _NO_COMMS)
    value, compute, comm_ms, step_ms, src = got
    rng = m.step_range(bd)
    where = m.range_text(rng)
    ev = (
        Evidence("overlap", f"{value:.2f}", src),
        Evidence("T_compute p50", f"{compute:.2f} ms", where),
        Evidence("T_comm per step", f"{comm_ms:.2f} ms", src),
        Evidence("T_step p50", f"{step_ms:.2f} ms", where),
        _overlap_setting(inputs),
    )
    caveat = "the comms logger synchronizes every collective, so this is a lower bound"
    if value >= th.OVERLAP_MIN:
        return Finding(Status.PASS, f"overlap {value:.2f} ({caveat})", ev, steps=rng)
    fix = fix_json({"zero_optimization": {"overlap_comm": True}})
    return Finding(
        Status.WARN,
        f"overlap {value:.2f} < {th.OVERLAP_MIN}: steps take about "
        f"compute + communication ({caveat})",
        ev,
        fix,
        steps=rng,
    )
