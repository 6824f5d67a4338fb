"""Runtime rules on every rank (the probe of ``dsmon run``): a straggler, input, a hang.

DeepSpeed's own output shows rank 0 only, so neither can be judged from a log: both rules
need the probe's ``rank_step`` and ``heartbeat`` records and are not applicable without them.
The straggler rule compares what each rank needed by itself per step (busy time, see
:mod:`dsmon.analysis.ranks`); the hang rule (:mod:`dsmon.health.hang`) names the rank that
stopped and where, and where the others wait, long before the collective times out.
"""

from __future__ import annotations

import pandas as pd

from dsmon.analysis import ranks
from dsmon.health import measures as m
from dsmon.health import probe_measures as pm
from dsmon.health import thresholds as th
from dsmon.health.collective_timeout import DESCRIBED
from dsmon.health.hang import judge_hang
from dsmon.health.inputs import HealthInputs
from dsmon.health.model import Evidence, Finding, Status, Tier, percent
from dsmon.health.registry import rule
from dsmon.health.verdicts import not_applicable

_NO_PROBE = "no per-rank data: start the job with 'dsmon run -- <launch command>'"


@rule(
    "ranks.straggler",
    "No rank holds the others up",
    "Per step, the slowest rank's busy time (its step time minus the time it waited in "
    "collectives) over the median rank's (on two ranks, the other rank's), from the per-rank "
    "probe: a median above "
    f"{th.STRAGGLER_WARN:g} warns, above {th.STRAGGLER_FAIL:g} fails, when one rank is the "
    f"slowest in at least {percent(th.STRAGGLER_CONSISTENT_SHARE)} of the steps (jitter "
    "makes the ranks take turns).",
    "runtime",
    page="steps",
    follows=("gpu.throttling",),
)
def check_straggler(inputs: HealthInputs) -> Finding:
    """Warn or fail when one rank is persistently slower than the median rank."""
    if pm.rank_stats(inputs).empty:
        return not_applicable(_NO_PROBE)
    summary = pm.stragglers(inputs)
    split = summary.split()
    if split is None:
        return Finding(
            Status.UNKNOWN,
            "no rank was ever seen held in a collective (on a GPU, NCCL's collectives return "
            "at once and wait on the device), so waiting cannot be told from work: compare the "
            "ranks' fwd_ms and bwd_ms",
        )
    if summary.steps < th.STRAGGLER_MIN_STEPS:
        return Finding(
            Status.UNKNOWN, f"only {summary.steps} steps timed on two or more ranks: too few"
        )
    score = summary.score.median()
    top = summary.slowest_counts().iloc[0]
    rank, share = int(top["rank"]), float(top["share"])
    named = summary.named()
    rng = summary.step_range()
    ev = (
        Evidence("median straggler score", f"{score:.2f}", m.range_text(rng)),
        Evidence(
            f"slowest rank most often: rank {rank}",
            f"{int(top['steps'])} of {summary.steps} steps ({share:.0%})",
        ),
        Evidence("median busy time of the slowest rank", f"{summary.slowest_ms.median():.1f} ms"),
        Evidence(
            "median busy time of the rank it is compared with",
            f"{summary.median_ms.median():.1f} ms",
            "the median rank; on two ranks, the other one",
        ),
        Evidence(
            "waiting for the slowest rank p50",
            f"{split.wait_share:.1%} of a step ({split.wait_ms:.1f} ms)",
            "the rank that waited most; wire time "
            f"{split.wire_share:.1%} of a step (comm.share judges it)",
        ),
    )
    if not score > th.STRAGGLER_WARN:
        return Finding(
            Status.PASS, f"ranks are balanced (straggler score {score:.2f})", ev, steps=rng
        )
    if named is None:
        return Finding(
            Status.PASS,
            f"no rank holds the others up: the slowest rank changes from step to step (rank "
            f"{rank} in {share:.0%} of steps, straggler score {score:.2f}): jitter, not one "
            "slow rank",
            ev,
            steps=rng,
        )
    status = Status.FAIL if score > th.STRAGGLER_FAIL else Status.WARN
    return Finding(
        status,
        f"rank {rank} is the slowest in {share:.0%} of steps; the others wait for it "
        f"{split.wait_share:.1%} of a step (straggler score {score:.2f})",
        ev,
        "on that rank's node: check GPU clocks and throttling, its input pipeline, and other "
        "processes (nvidia-smi, top)",
        "text",
        steps=rng,
        follows=_straggler_causes(inputs, rank),
    )


def _straggler_causes(inputs: HealthInputs, rank: int) -> tuple[str, ...]:
    """The rules that would explain rank ``rank`` holding the others up.

    Time before its forwards is a cause of the straggling only when the straggler is itself
    one of the ranks held up there: then ``ranks.input_bound`` is the headline and this
    finding the symptom under it. Another rank's input time explains nothing here.
    """
    shares = _timed_input_shares(inputs)
    held = shares[(shares["share"] >= th.INPUT_BOUND_WARN) & (shares["rank"] == rank)]
    return ("ranks.input_bound", "gpu.throttling") if not held.empty else ("gpu.throttling",)


@rule(
    "ranks.input_bound",
    "No rank is held up before its forward",
    "Per rank, from the per-rank probe: the time outside the engine before its forwards "
    "(data loading, the script's host work) as a share of its step, over the run: "
    f"{percent(th.INPUT_BOUND_WARN)} warns, {percent(th.INPUT_BOUND_FAIL)} fails. An "
    "input-bound rank is one cause of a straggler: the others wait for it in the next "
    "collective, so when it is the straggler, the straggler's finding is shown under this one.",
    "runtime",
    page="steps",
)
def check_input_bound(inputs: HealthInputs) -> Finding:
    """Name the ranks held up before their forwards, with how long and what share.

    The probe sees only that the time passed in the training loop, not what the loop did,
    so the finding says where the time went and names data loading as the usual cause,
    never as a fact.
    """
    if pm.rank_stats(inputs).empty:
        return not_applicable(_NO_PROBE)
    timed = _timed_input_shares(inputs)
    if timed.empty or not (pm.rank_stats(inputs)["step"] > 1).any():
        return Finding(Status.UNKNOWN, "too few steps timed, or a probe too old to time input")
    bound = timed[timed["share"] >= th.INPUT_BOUND_WARN]
    worst = timed.iloc[0]
    ev = tuple(
        Evidence(
            f"rank {int(r['rank'])}: before its forwards",
            f"{r['input_ms']:.1f} ms per step, {r['share']:.0%} of its step",
            f"mean of {int(r['steps'])} steps",
        )
        for _, r in timed.head(4).iterrows()
    )
    if bound.empty:
        return Finding(
            Status.PASS,
            f"no rank is held up before its forward: at most {worst['share']:.0%} of a step "
            f"outside DeepSpeed (rank {int(worst['rank'])}, {worst['input_ms']:.1f} ms)",
            ev,
        )
    status = Status.FAIL if worst["share"] >= th.INPUT_BOUND_FAIL else Status.WARN
    if len(bound) == len(timed) and len(timed) > 1:
        what = (
            f"every rank spends up to {worst['input_ms']:.0f} ms per step outside DeepSpeed "
            f"before its forward (rank {int(worst['rank'])}: {worst['share']:.0%} of its step)"
        )
    else:
        said = [
            f"rank {int(r['rank'])} spends {r['input_ms']:.0f} ms per step outside DeepSpeed "
            f"before its forward: {r['share']:.0%} of its step"
            for _, r in bound.head(3).iterrows()
        ]
        more = f" (and {len(bound) - 3} more ranks)" if len(bound) > 3 else ""
        what = "; ".join(said) + more
    return Finding(
        status,
        f"{what}. That time is spent in the training loop, most often loading data",
        ev,
        "# if it is the rank's DataLoader: load ahead of the step\n"
        "DataLoader(dataset, batch_size=..., num_workers=4, pin_memory=True, "
        "persistent_workers=True, prefetch_factor=2)",
        "python",
    )


def _timed_input_shares(inputs: HealthInputs) -> pd.DataFrame:
    """Each rank's time before its forwards and its share of its step, worst first.

    Only the ranks timed over enough steps to judge: both rules must see the same ranks.
    """
    shares = ranks.input_shares(pm.rank_phases(inputs))
    return shares[shares["share"].notna() & (shares["steps"] >= th.STRAGGLER_MIN_STEPS)]


@rule(
    "ranks.hang",
    "No rank is hung",
    "From the per-rank probe's heartbeats, live and as of the end of a saved run's record: a "
    f"rank silent for {th.HEARTBEAT_SILENT_S:g} s while others report, or stuck outside a "
    f"collective for max({th.HANG_MIN_S:g} s, {th.HANG_STEP_FACTOR:g} x the median step) "
    "while others wait in one, is named with its phase and where the others wait, long "
    f"before {DESCRIBED} fires.",
    "runtime",
    page="steps",
    tier=Tier.STATE,
    follows=("run.state", "run.errors"),
)
def check_hang(inputs: HealthInputs) -> Finding:
    """Fail naming the rank that holds the job up, its phase, and what the others wait in."""
    return judge_hang(inputs).finding
