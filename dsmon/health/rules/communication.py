"""Runtime rules on communication, from the run's own records.

Each rule states what its numbers can and cannot see. The engine timers only measure the
communication a step waits for (with overlap_comm on, ``bwd_allreduce`` is the exposed tail;
ZeRO-3 all-gathers hide inside fwd/bwd), and they are rank 0's: when another rank is slower,
rank 0 waits for it inside the collective and the timer holds the wait. With ``dsmon run``'s
probe on every rank the wait is told apart from the wire time (:mod:`dsmon.analysis.waiting`)
and the rules judge the wire time only; without it they say their figure includes waiting,
and a straggler or a hang, when found, is shown as their cause (:mod:`dsmon.health.triage`).
The comms logger synchronizes after every collective, so it distorts the overlap it is asked
to measure. The summaries say so next to the figures, as the Communication page does.
"""

from __future__ import annotations

import pandas as pd

from dsmon.analysis import comm, step_stats, waiting
from dsmon.analysis.percentiles import Percentiles
from dsmon.analysis.waiting import CommSplit
from dsmon.health import measures as m
from dsmon.health import probe_measures as pm
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
#: What a figure from rank 0's timers alone holds, said next to it.
INCLUDES_WAITING = (
    "rank 0's timers: the figure includes any wait for a slower rank; start the job with "
    "'dsmon run' to tell the wire time from the waiting"
)
#: Why a run with the probe still cannot split (NCCL on a GPU waits on the device).
NOT_BLOCKED = (
    "rank 0's timers: the figure includes any wait for a slower rank (the per-rank probe saw no "
    "rank held in a collective: NCCL waits on the device, so the wait cannot be told apart)"
)
#: The CPU accelerator has no streams: nothing overlaps, whatever overlap_comm says.
CPU_NO_OVERLAP = (
    "on DeepSpeed's CPU accelerator collectives run in line with compute (it has no streams), "
    "so overlap_comm cannot hide them"
)
#: Rules whose problem makes communication figures from rank 0's timers high: a straggler (rank
#: 0 waits for it inside the collective, step after step). Not the run's ending: a crash, a hang
#: or a stall stops the step it hits before its timers print, so the medians over the steps
#: that printed hold none of its waiting (a job stopped by Ctrl-C and one crashed at step 17
#: show the same shares over the steps before: tests/unit/health/test_verdicts.py).
_WAIT_CAUSES = ("ranks.straggler",)


def _overlap_setting(inputs: HealthInputs) -> Evidence:
    """The configured overlap_comm, for evidence next to measured communication."""
    if inputs.config is None:
        return Evidence("zero_optimization.overlap_comm", "unknown", "no config")
    return Evidence.of(inputs.config.get("zero_optimization.overlap_comm"))


def comm_split(inputs: HealthInputs) -> CommSplit | None:
    """Wire time and waiting for the slowest rank over the steady steps (None: unknown)."""
    if pm.rank_stats(inputs).empty:
        return None
    return pm.stragglers(inputs).split()


def _waiting_note(inputs: HealthInputs) -> str:
    """Why a timer figure was not split: no probe, or a probe that saw no rank blocked."""
    return NOT_BLOCKED if not pm.rank_stats(inputs).empty else INCLUDES_WAITING


def _on_cpu(inputs: HealthInputs) -> bool:
    """Whether the run is on DeepSpeed's CPU accelerator (no streams to overlap on)."""
    return inputs.facts.device == "cpu"


def _comm_fix(inputs: HealthInputs) -> str | None:
    """overlap_comm and full buckets, where overlapping can help (never on the CPU)."""
    if _on_cpu(inputs):
        return None
    return fix_json(
        {
            "zero_optimization": {
                "overlap_comm": True,
                "reduce_bucket_size": int(th.BUCKET_MAX),
                "allgather_bucket_size": int(th.BUCKET_MAX),
            }
        }
    )


def _judged(share: float) -> Status:
    """A communication share against COMM_SHARE_WARN and COMM_SHARE_FAIL."""
    if share <= th.COMM_SHARE_WARN:
        return Status.PASS
    return Status.FAIL if share > th.COMM_SHARE_FAIL else Status.WARN


@rule(
    "comm.share",
    f"Communication takes at most {percent(th.COMM_SHARE_WARN)} of a step",
    "Time in collectives as a share of the step, median over the steps after warm-up "
    f"(target: under {percent(th.COMM_SHARE_WARN)}). With dsmon run's probe on every rank, the "
    "wire time (the slowest rank's time in collectives: it waits for no one) apart from the "
    "waiting for the slowest rank, which is a straggler's cost, not the network's; else rank "
    "0's exposed communication (bwd_allreduce, + optimizer_allgather on ZeRO-1/2) as a share of "
    "fwd + bwd + step, waiting included.",
    "runtime",
    page="communication",
    follows=_WAIT_CAUSES,
)
def check_comm_share(inputs: HealthInputs) -> Finding:
    """The wire share when the ranks tell it, else rank 0's exposed share, against the lines."""
    split = comm_split(inputs)
    if split is not None:
        return _wire_share(inputs, split)
    return _timer_share(inputs)


def _timer_figures(inputs: HealthInputs) -> tuple[float, float, float, float] | None:
    """Rank 0's exposed share p50 and p90, exposed ms p50 and step total p50 (None: no timers)."""
    if m.breakdown(inputs).empty:
        return None
    stats = step_stats.share_stats(m.stat(inputs, step_stats.COMM_SHARE))
    if stats is None:
        return None
    exposed = m.stat(inputs, step_stats.EXPOSED_COMM_MS).median()
    total = m.stat(inputs, step_stats.STEP_TOTAL_MS).median()
    return stats.p50, stats.p90, exposed, total


def _wire_share(inputs: HealthInputs, split: CommSplit) -> Finding:
    """comm.share judged on the wire time; rank 0's timer figure as evidence beside it."""
    summary = pm.stragglers(inputs)
    rng = summary.step_range()
    where = f"{m.range_text(rng)}, dsmon run's probe, every rank"
    ev = [
        Evidence("wire time share p50", f"{split.wire_share:.1%}", where),
        Evidence("waiting for the slowest rank p50", f"{split.wait_share:.1%}", where),
        Evidence("wire time p50", f"{split.wire_ms:.2f} ms", where),
        Evidence("waiting p50", f"{split.wait_ms:.2f} ms", "the rank that waited most"),
    ]
    timers = _timer_figures(inputs)
    said = ""
    if timers is not None:
        ev.append(
            Evidence(
                "rank 0's exposed comm share p50 (timers)",
                f"{timers[0]:.1%}",
                f"{m.range_text(_shared_steps(m.breakdown(inputs)))}, waiting included",
            )
        )
        gap = timers[0] - split.wire_share
        # said only where the wait is what lifts rank 0's figure (at least half of the gap)
        if gap > th.COMM_SHARE_WARN / 5 and split.wait_share >= gap / 2:
            said = (
                f"; rank 0's timers show {timers[0]:.1%} because ranks wait "
                f"{split.wait_share:.1%} of a step for the slowest rank (see ranks.straggler)"
            )
    ev.append(_overlap_setting(inputs))
    status = _judged(split.wire_share)
    cpu = f"; {CPU_NO_OVERLAP}" if _on_cpu(inputs) and status is not Status.PASS else ""
    text = f"the wire time of collectives is {split.wire_share:.1%} of a step"
    if status is not Status.PASS:
        text += f" (> {th.COMM_SHARE_WARN:.0%})"
    return Finding(
        status,
        text + said + cpu,
        tuple(ev),
        None if status is Status.PASS else _comm_fix(inputs),
        steps=rng,
        follows=(),  # the wire time stands on its own: the waiting is left out
    )


def _timer_share(inputs: HealthInputs) -> Finding:
    """comm.share from rank 0's timers alone: waiting included, and said so."""
    bd = m.breakdown(inputs)
    if bd.empty:
        return Finding(Status.UNKNOWN, _NO_TIMERS)
    got = _timer_figures(inputs)
    if got is None:
        return Finding(Status.UNKNOWN, "the timer lines carry no bwd_allreduce figure")
    med, p90, exposed, total = got
    rng = _shared_steps(bd)
    where = f"{m.range_text(rng)}, slowest rank"
    ev = (
        Evidence("exposed comm share p50", f"{med:.1%}", where),
        Evidence("exposed comm share p90", f"{p90:.1%}", where),
        Evidence("exposed comm p50", f"{exposed:.2f} ms", where),
        Evidence("step total p50", f"{total:.2f} ms", where),
        _overlap_setting(inputs),
    )
    note = _waiting_note(inputs)
    status = _judged(med)
    if status is Status.PASS:
        return Finding(
            status, f"communication is {med:.1%} of a step; {_EXPOSED}; {note}", ev, steps=rng
        )
    cpu = f"; {CPU_NO_OVERLAP}" if _on_cpu(inputs) else ""
    return Finding(
        status,
        f"communication is {med:.1%} of a step (> {th.COMM_SHARE_WARN:.0%}); {_EXPOSED}; "
        f"{note}{cpu}",
        ev,
        _comm_fix(inputs),
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


#: (label, share, where it comes from, whether it is judged against the line)
_Share = tuple[str, float, str, bool]


def _phase_shares(inputs: HealthInputs, bd: pd.DataFrame, notes: list[Evidence]) -> list[_Share]:
    """The reduction against bwd, and the all-gather against the phase it runs in.

    Only ZeRO-3 all-gathers parameters in the forward; ZeRO-1/2's all-gather follows the
    optimizer step (``optimizer_allgather``), so it is set against the whole step and not
    judged here (comm.share counts it).
    """
    bd_all = m.all_steps(inputs)
    ops, distrust = m.trusted_comm_ops(inputs, bd_all)
    if distrust:
        notes.append(Evidence("comms logger", "ignored", distrust))
    gather = m.op_latency_ms(ops, ("all_gather",))
    reduce = m.op_latency_ms(ops, ("reduce_scatter", "all_reduce"))
    if gather is None and reduce is None:  # no logger: the timers alone (no sums over the run)
        return _timer_phase_shares(inputs, bd, notes)
    out: list[_Share] = []
    fwd, bwd = m.per_step(bd_all, "fwd_ms").sum(), m.per_step(bd_all, "bwd_ms").sum()
    total = m.per_step(bd_all, "total_ms").sum()
    src = "comms logger total latency / summed timers"
    if gather is not None and _zero3(inputs) and fwd > 0:
        out.append(("all-gather share of fwd", gather / fwd, src, True))
    elif gather is not None and total > 0:
        out.append(
            ("all-gather share of the step (after the optimizer step)", gather / total, src, False)
        )
    if reduce is not None and bwd > 0:
        out.append(("reduce-scatter/all-reduce share of bwd", reduce / bwd, src, True))
    return out if any(judged for *_, judged in out) else _timer_phase_shares(inputs, bd, notes)


def _zero3(inputs: HealthInputs) -> bool:
    """Whether the run is ZeRO-3 (the only stage whose all-gathers run inside fwd and bwd)."""
    return inputs.config is not None and inputs.config.stage == 3


def _timer_phase_shares(
    inputs: HealthInputs, bd: pd.DataFrame, notes: list[Evidence]
) -> list[_Share]:
    """Phase shares from the timers alone: exposed communication, rank 0's.

    With the per-rank split, the wait for the slowest rank is taken out of each step's
    ``bwd_allreduce`` (and of ``bwd``, which holds it): the gradient reduction is the first
    collective after the forward, where a rank that is late arrives last.
    """
    out: list[_Share] = []
    wire = _reduction_wire_share(inputs, bd)
    bwd_share = step_stats.share_stats(m.stat(inputs, step_stats.ALLREDUCE_OF_BWD))
    if wire is not None:
        out.append(("bwd_allreduce less waiting, share of bwd less waiting", wire, _WIRE_SRC, True))
        if bwd_share is not None:
            notes.append(
                Evidence(
                    "bwd_allreduce share of bwd, waiting included",
                    f"{bwd_share.p50:.1%}",
                    "rank 0's timers",
                )
            )
    elif bwd_share is not None:
        out.append(
            (
                "bwd_allreduce share of bwd",
                bwd_share.p50,
                "rank 0's timers, median over steps, waiting included",
                True,
            )
        )
    gather = step_stats.share_stats(m.stat(inputs, step_stats.ALLGATHER_OF_STEP))
    if gather is not None:
        out.append(
            (
                "optimizer_allgather share of the step",
                gather.p50,
                "ZeRO-1/2 timers, median over steps (in comm.share)",
                False,
            )
        )
    return out


_WIRE_SRC = "timers less the wait for the slowest rank (dsmon run's probe), median over steps"


def _reduction_wire_share(inputs: HealthInputs, bd: pd.DataFrame) -> float | None:
    """Median over steps of (bwd_allreduce - wait) / (bwd - wait); None without the split.

    From :attr:`HealthInputs.stats` when the caller keeps it (a live dashboard, whose values
    grow with new steps only), else from the whole breakdown and the probe's steps.
    """
    if comm_split(inputs) is None or "bwd_allreduce_ms" not in bd.columns:
        return None
    kept = inputs.stats(waiting.REDUCTION_WIRE_OF_BWD) if inputs.stats is not None else None
    if kept is None:
        per = waiting.comm_split(m.steady(pm.rank_stats(inputs)))
        kept = Percentiles.of(waiting.reduction_wire_shares(bd, per))
    return kept.median() if kept.n else None


@rule(
    "comm.phase_share",
    f"All-gather and reduction stay under {percent(th.PHASE_COMM_SHARE_WARN)} of their phase",
    "Reduce-scatter/all-reduce time against bwd, and on ZeRO-3 all-gather time against fwd "
    "(read as 'allgather = 60 ms (24 % of fwd)'), from the comms logger when present, else from "
    "the timers, less the wait for the slowest rank when dsmon run's probe tells it. ZeRO-1/2's "
    "all-gather follows the optimizer step: it is shown against the step, and counted by "
    "comm.share.",
    "runtime",
    page="communication",
    follows=_WAIT_CAUSES,
)
def check_phase_share(inputs: HealthInputs) -> Finding:
    """Warn when a judged collective family exceeds PHASE_COMM_SHARE_WARN of its phase."""
    bd = m.breakdown(inputs)
    if bd.empty:
        return Finding(Status.UNKNOWN, _NO_TIMERS)
    notes: list[Evidence] = []
    shares = _phase_shares(inputs, bd, notes)
    if not any(judged for *_, judged in shares):
        return Finding(
            Status.UNKNOWN, "no communication figure per phase in timers or logger", tuple(notes)
        )
    rng = m.step_range(bd)
    ev = tuple(
        Evidence(
            label, f"{v:.1%}", f"{src}, {m.range_text(rng)}" + ("" if judged else ", not judged")
        )
        for label, v, src, judged in shares
    ) + tuple(notes)
    high = [
        f"{label} {v:.1%}"
        for label, v, _, judged in shares
        if judged and v > th.PHASE_COMM_SHARE_WARN
    ]
    split = any(src == _WIRE_SRC for _, _, src, _ in shares)
    follows = () if split else None
    if not high:
        return Finding(
            Status.PASS,
            f"each phase's communication is within {percent(th.PHASE_COMM_SHARE_WARN)}",
            ev,
            steps=rng,
            follows=follows,
        )
    zero3 = _zero3(inputs)
    bucket = "stage3_prefetch_bucket_size" if zero3 else "allgather_bucket_size"
    fix = (
        None
        if _on_cpu(inputs)
        else fix_json(
            {
                "zero_optimization": {
                    "overlap_comm": True,
                    "reduce_bucket_size": int(th.BUCKET_MAX),
                    bucket: int(th.PREFETCH_BUCKET_DEFAULT if zero3 else th.BUCKET_MAX),
                }
            }
        )
    )
    why = "" if split else f"; {_waiting_note(inputs)}"
    cpu = f"; {CPU_NO_OVERLAP}" if _on_cpu(inputs) else ""
    return Finding(
        Status.WARN,
        "; ".join(high) + f" (> {percent(th.PHASE_COMM_SHARE_WARN)}){why}{cpu}",
        ev,
        fix,
        steps=rng,
        follows=follows,
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
    follows=_WAIT_CAUSES,
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
    cpu = _on_cpu(inputs)
    fix = None if cpu else fix_json({"zero_optimization": {"overlap_comm": True}})
    return Finding(
        Status.WARN,
        f"overlap {value:.2f} < {th.OVERLAP_MIN}: steps take about "
        f"compute + communication ({caveat})" + (f"; {CPU_NO_OVERLAP}" if cpu else ""),
        ev,
        fix,
        steps=rng,
    )
