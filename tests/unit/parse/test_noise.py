"""Every kind of noise real logs carry leaves the records of a real run unchanged.

The clean reference is the real ZeRO-2 run (tests/data/z2, DeepSpeed 0.19.8). Each test
dirties the same real file the way a launcher, a terminal or a progress bar would, and checks
that the parsed records carry the same values and steps as the clean file's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from locations import DATA

from dsmon.model.records import Record, TimerRecord
from dsmon.parse.log import parse_text

LOG = (DATA / "z2" / "train.log").read_text(encoding="utf-8")
LINES = LOG.splitlines()


def essence(recs: list[Record]) -> list[tuple[Any, ...]]:
    """What must not change: kind, step, rank and the values, in file order."""
    out: list[tuple[Any, ...]] = []
    for r in recs:
        if isinstance(r, TimerRecord):
            out.append((r.KIND, r.step, r.group, tuple(sorted(r.values_ms.items()))))
        elif r.KIND in ("step", "throughput", "flops_profile", "loss_scale"):
            fields = {k: v for k, v in vars_of(r).items() if k not in ("src", "ts")}
            out.append((r.KIND, r.step, tuple(sorted((k, repr(v)) for k, v in fields.items()))))
    return out


def vars_of(rec: Record) -> dict[str, Any]:
    return {name: getattr(rec, name) for name in rec.__dataclass_fields__}


CLEAN, CLEAN_DIAG = parse_text(LOG, run="z2", file="train.log")


def _pdsh(lines: list[str]) -> str:
    return "\n".join(f"worker-1: {ln}" for ln in lines)


def _slurm(lines: list[str]) -> str:
    return "\n".join(f"0: {ln}" for ln in lines)


def _ansi(lines: list[str]) -> str:
    out = []
    for ln in lines:
        ln = ln.replace("[INFO]", "[\x1b[32mINFO\x1b[0m]").replace(
            "[WARNING]", "[\x1b[33mWARNING\x1b[0m]"
        )
        out.append(f"\x1b[0m{ln}\x1b[0m" if ln.startswith("[Rank") else ln)
    return "\n".join(out)


def _crlf(lines: list[str]) -> str:
    return "\r\n".join(lines)


def _tqdm(lines: list[str]) -> str:
    bar = " 37%|███▋      | 11/30 [00:01<00:02,  7.52it/s]"
    return "\n".join(f"{bar}\r{ln}" if ln.startswith("[Rank 0] time") else ln for ln in lines)


def _glued(lines: list[str]) -> str:
    """Pairs of timer lines written by two processes at once land on one physical line."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("[Rank 0] time (ms) | fwd_micro") and i + 1 < len(lines):
            out.append(lines[i] + lines[i + 1])
            i += 2
        else:
            out.append(lines[i])
            i += 1
    return "\n".join(out)


def _wrapped(lines: list[str]) -> str:
    """A terminal 80 columns wide that hard-wraps the long timer lines."""
    out: list[str] = []
    for ln in lines:
        if ln.startswith("[Rank 0] time (ms)") and len(ln) > 80:
            out.extend(ln[i : i + 80] for i in range(0, len(ln), 80))
        else:
            out.append(ln)
    return "\n".join(out)


def _kubectl(lines: list[str]) -> str:
    return "\n".join(f"[pod/train-0/trainer] {ln}" for ln in lines)


def _tee(lines: list[str]) -> str:
    """torch.distributed.run --tee: the local rank, no space after the colon."""
    return "\n".join(f"[default0]:{ln}" for ln in lines)


def _stdout(lines: list[str]) -> str:
    return "\n".join(f"stdout: {ln}" for ln in lines)


def _job_runner(lines: list[str]) -> str:
    return "\n".join(f"2026-11-29 14:12:{i % 60:02d} run6231: {ln}" for i, ln in enumerate(lines))


def _kubectl_timestamps(lines: list[str]) -> str:
    return "\n".join(f"2026-11-29T14:12:{i % 60:02d}.123456789Z {ln}" for i, ln in enumerate(lines))


def _quoted(lines: list[str]) -> str:
    """Pasted as a Markdown quote."""
    return "\n".join(f"> {ln}".rstrip() for ln in lines)


def _code_block(lines: list[str]) -> str:
    """Pasted as an indented Markdown code block."""
    return "\n".join(f"    {ln}".rstrip() for ln in lines)


def _line_numbers(lines: list[str]) -> str:
    """Copied from an editor showing line numbers."""
    return "\n".join(f"{i:5d} {ln}".rstrip() for i, ln in enumerate(lines, 1))


def _inline_code(lines: list[str]) -> str:
    """Pasted as one inline code span: a backtick before the first line and after the last."""
    return "`" + "\n".join(lines) + "`"


NOISE: dict[str, Callable[[list[str]], str]] = {
    "torch elastic --tee": _tee,
    "stdout: stream label": _stdout,
    "job runner stamp and host": _job_runner,
    "kubectl --timestamps": _kubectl_timestamps,
    "markdown quote": _quoted,
    "markdown code block": _code_block,
    "editor line numbers": _line_numbers,
    "inline code span": _inline_code,
    "pdsh host prefix": _pdsh,
    "slurm task label": _slurm,
    "ansi colours": _ansi,
    "crlf endings": _crlf,
    "tqdm bar glued with \\r": _tqdm,
    "two lines glued": _glued,
    "terminal wrapped at 80": _wrapped,
    "kubectl --prefix": _kubectl,
}


@pytest.mark.parametrize("name", sorted(NOISE))
def test_noise_leaves_records_unchanged(name: str) -> None:
    noisy = NOISE[name](LINES)
    recs, diag = parse_text(noisy, run="z2", file="train.log")
    assert essence(recs) == essence(CLEAN)
    assert sum(diag.unparsed.values()) == 0, diag.examples


def test_reference_is_not_trivial() -> None:
    timers = [r for r in CLEAN if isinstance(r, TimerRecord) and r.group == "global"]
    assert len(timers) == 30
    # the third global timer line of the file: fwd 10.28 | bwd 26.15 | ... | step 10.35
    assert timers[2].step == 3
    assert timers[2].values_ms == {
        "fwd": 10.28,
        "bwd": 26.15,
        "bwd_inner": 19.74,
        "bwd_allreduce": 6.37,
        "step": 10.35,
    }


def test_host_prefix_becomes_the_node() -> None:
    recs, _ = parse_text(_pdsh(LINES), run="z2", file="train.log")
    assert {r.src.node for r in recs if r.KIND == "timer"} == {"worker-1"}


def test_torch_rank_prefix_is_a_traceback_of_that_rank() -> None:
    crash = (DATA / "events_crash_rank1_step17").glob("*.log")
    text = next(iter(crash)).read_text(encoding="utf-8")
    recs, _ = parse_text(text, run="c", file="train.log")
    tbs = [r for r in recs if r.KIND == "event" and r.name == "traceback"]  # type: ignore[attr-defined]
    assert {r.src.rank for r in tbs} >= {1}


def test_lookalike_lines_are_not_engine_timers() -> None:
    """GPT-NeoX and activation checkpointing print their own ``time (ms)`` lines."""
    neox = "time (ms) | forward: 1234.56 | backward: 2345.67 | backward-backward: 2300.00 | optimizer: 50.00 | batch generator: 1.23"
    recs, _ = parse_text(neox, run="n", file="x.log")
    assert all(r.group not in ("global", "micro") for r in recs if isinstance(r, TimerRecord))
    ckpt = [ln for ln in (DATA / "act_ckpt" / "train.log").read_text().splitlines()]
    recs, _ = parse_text("\n".join(ckpt), run="a", file="train.log")
    one_field = [r for r in recs if isinstance(r, TimerRecord) and r.group == "act_ckpt"]
    assert one_field and all(len(r.values_ms) == 1 for r in one_field)


def test_no_value_is_invented_from_a_cut_timer_line() -> None:
    line = next(ln for ln in LINES if ln.startswith("[Rank 0] time (ms) | fwd:"))
    cut = line[: line.index("bwd_inner") + len("bwd_inner: 2")]
    recs, diag = parse_text(cut, run="z2", file="x.log")
    values = [v for r in recs if isinstance(r, TimerRecord) for v in r.values_ms.values()]
    assert all(re.search(rf"{v:.2f}", cut) for v in values)
    assert 2.0 not in values
