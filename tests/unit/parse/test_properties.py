"""Property tests: no input crashes a parser, and no record holds a value that is not in the input.

The inputs are real DeepSpeed lines from tests/data (copied from the corpus), damaged at random:
garbage bytes, lines cut at any point, lines of several runs interleaved in any order.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lanes import examples
from locations import DATA

from dsmon.model import wire
from dsmon.model.records import (
    CommOpRecord,
    Record,
    StepRecord,
    ThroughputRecord,
    TimerRecord,
)
from dsmon.parse.log import LogParser

RUNS = ("z2", "grad_accum", "fp16_zero2", "comms_logger_verbose", "z3")


def _real_lines() -> list[str]:
    lines: list[str] = []
    for run in RUNS:
        path = DATA / run / "train.log"
        if path.exists():
            lines.extend(path.read_text(encoding="utf-8").splitlines())
    return lines


REAL = _real_lines()
PROFILE = settings(
    max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def parse_all(lines: list[str]) -> list[Record]:
    parser = LogParser("prop", "input.log")
    out: list[Record] = []
    for ln in lines:
        out.extend(parser.feed(ln))
    out.extend(parser.finish())
    for rec in out:  # every record must survive its own wire form
        assert wire.decode(wire.encode(rec)) == rec
    return out


def values_in_input(rec: Record, text: str) -> list[str]:
    """The printed forms a record's values must have come from; empty if not checked."""
    if isinstance(rec, TimerRecord):
        return [f"{v:.2f}" for v in rec.values_ms.values()]
    if isinstance(rec, StepRecord) and rec.step is not None:
        return [f"step={rec.step}"]
    if isinstance(rec, ThroughputRecord) and rec.global_step is not None:
        return [f"global_step={rec.global_step}"]
    if isinstance(rec, CommOpRecord) and rec.latency_ms is not None:
        return [f"{rec.latency_ms:.2f}"]
    return []


def test_real_lines_are_available() -> None:
    assert len(REAL) > 500, "tests/data must hold the corpus runs named in RUNS"


@PROFILE
@given(st.lists(st.binary(max_size=300), max_size=40))
def test_garbage_bytes_never_crash(chunks: list[bytes]) -> None:
    lines = [c.decode("utf-8", errors="replace") for c in chunks]
    parse_all(lines)


@PROFILE
@given(st.data())
def test_truncated_real_lines_never_invent_values(data: st.DataObject) -> None:
    picked = data.draw(st.lists(st.sampled_from(REAL), min_size=1, max_size=60))
    cuts = data.draw(st.lists(st.integers(0, 400), min_size=len(picked), max_size=len(picked)))
    lines = [ln[:cut] if cut < len(ln) else ln for ln, cut in zip(picked, cuts, strict=True)]
    text = "\n".join(lines)
    for rec in parse_all(lines):
        for printed in values_in_input(rec, text):
            assert printed in text, f"{rec.KIND} value {printed!r} is not in the input"


@PROFILE
@given(st.randoms(use_true_random=False))
def test_interleaved_runs_never_crash_or_invent(rnd: random.Random) -> None:
    start = rnd.randrange(0, max(1, len(REAL) - 200))
    a = REAL[start : start + 100]
    b = REAL[-100:]
    merged: list[str] = []
    ia = ib = 0
    while ia < len(a) or ib < len(b):
        take_a = ib >= len(b) or (ia < len(a) and rnd.random() < 0.5)
        if take_a:
            merged.append(a[ia])
            ia += 1
        else:
            merged.append(b[ib])
            ib += 1
    if rnd.random() < 0.3 and len(merged) > 2:  # two processes' lines glued on one line
        k = rnd.randrange(len(merged) - 1)
        merged[k : k + 2] = [merged[k] + merged[k + 1]]
    text = "\n".join(merged)
    for rec in parse_all(merged):
        for printed in values_in_input(rec, text):
            assert printed in text


@pytest.mark.parametrize("run", RUNS)
def test_each_real_run_parses_without_unparsed_lines(run: str) -> None:
    path = DATA / run / "train.log"
    if not path.exists():
        pytest.fail(f"{path} missing: copy it from the corpus")
    parser = LogParser(run, "train.log")
    recs = list(parser.feed_lines(path.read_text(encoding="utf-8").splitlines()))
    assert recs
    assert sum(parser.diag.unparsed.values()) == 0, parser.diag.examples
