"""Property tests for every line parser alone and together, and for the ingest batch decoder.

Inputs are arbitrary bytes and the real lines of the field excerpts (../shared/corpus/field:
every DeepSpeed generation, launcher and paste style), damaged at random: lines cut at any
point, lines of two excerpts interleaved, two lines glued into one, runs of spaces inserted.
Whatever the input, no parser raises, and every figure of every record is a number printed in
the input (in the unit printed, or converted by a unit DeepSpeed prints: ms, s, KB..TB, GiB,
TFLOPs). The batch decoder refuses what it cannot take with a BatchError, and what it takes
from real encoded records, cut or interleaved, is always one of those records.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest
from field_logs import field_logs, needs_field_corpus
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from lanes import examples
from server_support import reference_batch, reference_rows

from dsmon.model import wire
from dsmon.model.records import KINDS, Record
from dsmon.parse import side_files as files
from dsmon.parse.base import Diagnostics, SubParser
from dsmon.parse.families.flops_profiler import FACTOR_OFFSET
from dsmon.parse.log import LogParser, default_parsers
from dsmon.parse.side_files import parse_profile_file
from dsmon.serve.batch import BatchError, parse_batch_rows
from dsmon.store.records.rows import Row
from dsmon.store.store import RowBatch

#: Hypothesis explores every parser for a while: the slow lane runs it, CI replays one sequence.
pytestmark = [needs_field_corpus, pytest.mark.slow]

PROFILE = settings(
    max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
FIELD_LINES = [ln for p in field_logs() for ln in p.read_text(encoding="utf-8").split("\n")]
#: One factory per line parser, named after its class.
PARSERS: dict[str, Callable[[], SubParser]] = {type(p).__name__: type(p) for p in default_parsers()}
#: Fields that are not figures read from the text: identity, time, counts the parser keeps.
NOT_FIGURES = frozenset(
    {"src", "ts", "step", "table_index", "detail", "config", "width"}
    | {"tuning_duration_s"}  # "Tuning completed in 0:01:00": a clock reading, not a number
)
#: Factors between a printed figure and a stored one (units DeepSpeed and Megatron print).
FACTORS = (1.0, 1e3, 1e-3, 1e6, 1e9, 1e12, 1e15, 1e-6, 1e-9) + tuple(
    float(1 << (10 * k)) for k in range(1, 5)
)
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")


def printed_numbers(text: str) -> list[float]:
    """Every number in the text, ``500,000,000`` read as one."""
    return [float(m) for m in _NUMBER.findall(_THOUSANDS.sub("", text))]


def figures(rec: Record) -> Iterator[tuple[str, float]]:
    """The record's numeric figures (inside mappings and tuples too), by field name."""
    for f in dataclasses.fields(rec):
        if f.name in NOT_FIGURES or (f.name == "micro_step" and rec.KIND == "timer"):
            continue
        if f.name == "nan_iterations" and is_trainer_flag(rec):
            continue  # a flag read off the printed loss: checked by assert_from_input
        yield from _numbers(f.name, getattr(rec, f.name))


def is_trainer_flag(rec: Any) -> bool:
    """A Trainer log dict's ``nan_iterations``: 1 for a NaN/inf loss printed, 0 for a finite one."""
    return rec.KIND == "iteration" and str(rec.fmt).startswith("trainer")


def _numbers(name: str, value: Any) -> Iterator[tuple[str, float]]:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int | float):
        yield name, float(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _numbers(name, v)
    elif isinstance(value, tuple):
        for v in value:
            if dataclasses.is_dataclass(v):
                continue  # flops-profile module rows: checked by the flops profiler's tests
            yield from _numbers(name, v)


def came_from(value: float, printed: list[float]) -> bool:
    """The value is a printed number, in its own unit or converted by a known factor."""
    if not math.isfinite(value):
        return False
    for n in printed:
        for f in FACTORS:
            target = n * f
            if abs(target - value) <= max(1e-9 * abs(value), 0.5 if f > 1 else 1e-12):
                return True
    return False


def parse(lines: list[str], parsers: list[SubParser] | None = None) -> list[Record]:
    parser = LogParser("prop", "input.log", parsers=parsers)
    out: list[Record] = []
    for ln in lines:
        out.extend(parser.feed(ln))
    out.extend(parser.finish())
    return out


#: Figures computed from a printed one, and how: the flops profiler's ``bwd_factor`` is read off
#: a label's ``= N * fwd flops``, as N for the bwd label and N - 1 for the fwd+bwd and iter
#: ones (``dsmon.parse.families.flops_profiler.FACTOR_OFFSET``).
DERIVED = {"bwd_factor": tuple(sorted(set(FACTOR_OFFSET.values())))}


def assert_from_input(recs: list[Record], lines: list[str]) -> None:
    printed = sorted(set(printed_numbers("\n".join(lines))))
    for rec in recs:
        assert wire.decode(wire.encode(rec)) == rec
        if is_trainer_flag(rec) and rec.nan_iterations is not None:  # type: ignore[attr-defined]
            # 0 only beside a finite loss or grad norm read from the dict; 1 for a NaN/inf one
            read = bool(rec.losses) or rec.grad_norm is not None  # type: ignore[attr-defined]
            assert rec.nan_iterations == 1 or read, f"{rec} counts NaNs of no loss"  # type: ignore[attr-defined]
        for name, value in figures(rec):
            found = any(came_from(value + k, printed) for k in DERIVED.get(name, (0,)))
            assert found, f"{rec.KIND}.{name} = {value!r} is not in the input"


def test_the_field_lines_are_there() -> None:
    assert len(FIELD_LINES) > 1000


@st.composite
def damaged_field_lines(draw: st.DrawFn) -> list[str]:
    """A run of real lines, then cut, interleaved with another run, glued, re-spaced."""
    rnd = draw(st.randoms(use_true_random=False))
    start = rnd.randrange(len(FIELD_LINES))
    a = FIELD_LINES[start : start + rnd.randint(1, 60)]
    other = rnd.randrange(len(FIELD_LINES))
    b = FIELD_LINES[other : other + rnd.randint(0, 40)]
    merged: list[str] = []
    while a or b:
        take = a if a and (not b or rnd.random() < 0.5) else b
        merged.append(take.pop(0))
    return [_damage(line, rnd) for line in _glue(merged, rnd)]


def _glue(lines: list[str], rnd: random.Random) -> list[str]:
    if len(lines) > 2 and rnd.random() < 0.3:  # two processes writing at once
        k = rnd.randrange(len(lines) - 1)
        lines[k : k + 2] = [lines[k] + lines[k + 1]]
    return lines


def _damage(line: str, rnd: random.Random) -> str:
    roll = rnd.random()
    if roll < 0.2 and line:
        return line[: rnd.randrange(len(line))]  # cut anywhere
    if roll < 0.3 and line:
        return line[rnd.randrange(len(line)) :]  # its start lost (a paste from mid-line)
    if roll < 0.4 and line:
        k = rnd.randrange(len(line))
        return line[:k] + " " * rnd.randint(2, 12) + line[k:]  # a terminal's re-spacing
    return line


@pytest.mark.parametrize("name", sorted(PARSERS))
@PROFILE
@given(chunks=st.lists(st.binary(max_size=200), max_size=30))
def test_each_parser_survives_arbitrary_bytes(name: str, chunks: list[bytes]) -> None:
    lines = [c.decode("utf-8", errors="replace") for c in chunks]
    assert_from_input(parse(lines, [PARSERS[name]()]), lines)


# Each parser alone (no other parser takes a line first): slow, 10 x 40 examples; the fast lane
# keeps the same property for all parsers together (test_all_parsers_never_invent_a_value).
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PARSERS))
@PROFILE
@given(lines=damaged_field_lines())
def test_each_parser_never_invents_a_value(name: str, lines: list[str]) -> None:
    assert_from_input(parse(lines, [PARSERS[name]()]), lines)


#: Damaged field lines Hypothesis found reading a number nobody printed (``441.545`` + ``03``,
#: ``=1`` + ``0.9``: a cut line joined to lines that were no continuation); every run tries them.
#: The second and third lines of field excerpt 07's BLOOM iteration line, wrapped at 133.
BLOOM_TAIL = (
    ": 104.70 | learning rate: 1.150E-05 | global batch size: 2048 | lm loss: 1.979558E+00 "
    "| grad norm: 0.132 | num zeros: 0.0 | number of sk",
    "ipped iterations:  0 | number of nan iterations:  0 | samples per second: 19.561 "
    "| TFLOPs: 149.77",
)
JOINED_CUTS = (
    [
        "    steps: 110 loss: 1.9161 i  ter time (s): 0.580 samples/sec: 441.545",
        "03 08:58:01,996] [INFO] [logging.py:107:log_dist] [Rank 0] step=120, skipped=0, "
        "lr=[0.001], mom=[[0.9, 0.999]]",
        "    steps: 120 loss: 1.7843 iter time (s): 0.573 samples/sec: 446.940",
    ],
    [
        "    [2025-07-03 08:57:56,267] [INFO] [logging.py:107:log_dist] [Rank 0] step=110, "
        "skipped=0, lr=[",
        "    steps: 110 loss: 1.9161 iter time (s): 0.580 samples/sec: 441.545",
        "120, skipped=0, lr=[0.001], mom=[[0.9, 0.999]]",
    ],
    [
        "[2023-04-18 01:46:59,171] [INFO] [timer.py:199:stop] epoch=0/micro_step=10/"
        "global_step=10, RunningAvgSamplesPerSec=1",
        "0.9, 0.95)]",
    ],
    [
        "[2023-05-15 14:38:04,876] [INFO] [logging.py:96:log_dist] [Rank 0] rank=0 | comm op: "
        "reduce | time (ms): 0.09 | msg size: 20.32 KB | algbw (Gbps): 1",
        "0.22314453125|cri_loss: 0.1396484375|unsuper_loss: 0.0",
    ],
    [  # a wrapped BLOOM line (field 07), then one cut after a name: another field's seconds
        "[default7]: iteration   85376/ 115311 | consumed samples:   158692272 | consumed tokens"
        ": 325001773056 | elapsed time per iteration (s)",
        *BLOOM_TAIL,
        "",
        "[default7]: iteration   85376/ 115311 | consumed samples:   158692272 | consumed tokens",
        BLOOM_TAIL[0],
        "worker-0:     betas: [0.8, 0.999]",
    ],
)


@PROFILE
@given(lines=damaged_field_lines())
@example(lines=JOINED_CUTS[0])
@example(lines=JOINED_CUTS[1])
@example(lines=JOINED_CUTS[2])
@example(lines=JOINED_CUTS[3])
@example(lines=JOINED_CUTS[4])
def test_all_parsers_never_invent_a_value(lines: list[str]) -> None:
    assert_from_input(parse(lines), lines)


@pytest.mark.parametrize("path", field_logs(), ids=lambda p: p.name[:2])
def test_every_excerpt_as_it_is_only_holds_printed_values(path: Any) -> None:
    lines = path.read_text(encoding="utf-8").split("\n")
    assert_from_input(parse(lines), lines)


# --- whole-file parsers ----------------------------------------------------------------------


def _experiment(text: str, run: str, file: str) -> tuple[list[Record], Diagnostics]:
    return [files.parse_autotune_experiment("exp", text, run, file, text, text)], Diagnostics()


def _ds_config(text: str, run: str, file: str) -> tuple[list[Record], Diagnostics]:
    return [files.parse_ds_config(text, run, file)], Diagnostics()


FILE_PARSERS: dict[str, Callable[[str, str, str], tuple[Sequence[Record], Diagnostics]]] = {
    "csv_monitor": files.parse_csv_monitor,
    "autotune_summary": files.parse_autotune_summary,
    "flops_profile_file": parse_profile_file,
    "autotune_experiment": _experiment,
    "ds_config": _ds_config,
}


@pytest.mark.parametrize("name", sorted(FILE_PARSERS))
@PROFILE
@given(text=st.text(max_size=600) | damaged_field_lines().map("\n".join))
def test_each_file_parser_refuses_or_reads_only_printed_values(name: str, text: str) -> None:
    try:
        recs, _ = FILE_PARSERS[name](text, "prop", "input")
    except files.FileFormatError:
        return
    # an experiment's figures are converted from the file's µs, checked by its own tests
    assert_from_input([r for r in recs if r.KIND != "autotune_exp"], text.split("\n"))


# --- the ingest batch decoder ----------------------------------------------------------------


def _encoded_field_records() -> list[str]:
    out: list[str] = []
    for path in field_logs()[::3]:
        out.extend(wire.encode(r) for r in parse(path.read_text(encoding="utf-8").split("\n")))
    return out


ENCODED = _encoded_field_records()


def decode_or_refuse(body: bytes) -> list[Record] | None:
    """The records of a batch, or None when it is refused; any other exception fails.

    The server's own path (``parse_batch_rows``, rows made without records where it can)
    must refuse the same batches with the same message, and store the same rows.
    """
    try:
        made: RowBatch | str = parse_batch_rows(body)
    except BatchError as exc:
        made = exc.message
    try:
        got = reference_batch(body)
    except BatchError as exc:
        assert exc.status == 400 and exc.message.startswith("line ")
        assert made == exc.message
        return None
    assert not isinstance(made, str), made
    expected = reference_rows(body)
    assert [same_row(r) for r in made.rows] == [same_row(r) for r in expected.rows]
    assert made.samples == expected.samples
    return [e.record for e in got]


def same_row(row: Row) -> tuple[object, ...]:
    """A row with its body as the record it holds: a line with "NaN" in a string is stored
    as sent by one path and re-encoded by the other, the same record either way. (The
    server's rows are plain tuples in ``RecordRow``'s order, the body last.)"""
    return (*row[:-1], wire.decode(row[-1]))


def test_real_encoded_records_are_there() -> None:
    assert len(ENCODED) > 100 and len({json.loads(e)["kind"] for e in ENCODED}) >= 8


@PROFILE
@given(st.binary(max_size=2000))
@example(b"0\x0b")  # a vertical tab is not JSON's space: the line is not JSON (found here)
@example(b"\x0b0")
@example(b"\x0b\n\x0c")
@example(b"\r\xc2\x80")  # the server named the column of the line it had stripped (CI found it)
def test_batch_of_arbitrary_bytes_is_refused_or_read(body: bytes) -> None:
    decode_or_refuse(body)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=20,
)


@PROFILE
@given(
    kind=st.sampled_from(sorted(KINDS)), fields=st.dictionaries(st.text(max_size=15), json_values)
)
def test_batch_of_arbitrary_objects_of_every_kind_is_refused_or_read(
    kind: str, fields: dict[str, Any]
) -> None:
    body = json.dumps({"kind": kind, "src": {"run": "r"}, **fields}).encode()
    decode_or_refuse(body)


@PROFILE
@given(st.data())
def test_real_record_with_one_field_changed_is_refused_or_read(data: st.DataObject) -> None:
    """Known fields of every type (and ``src``'s) given any JSON value: both paths agree."""
    obj = json.loads(data.draw(st.sampled_from(ENCODED)))
    target = obj["src"] if data.draw(st.booleans()) else obj
    target[data.draw(st.sampled_from(sorted(target)))] = data.draw(json_values)
    decode_or_refuse(json.dumps(obj).encode())


@PROFILE
@given(st.data())
def test_batch_of_cut_and_interleaved_real_lines_holds_only_sent_records(
    data: st.DataObject,
) -> None:
    picked = data.draw(st.lists(st.sampled_from(ENCODED), min_size=1, max_size=30))
    cuts = data.draw(st.lists(st.integers(0, 600), min_size=len(picked), max_size=len(picked)))
    lines = [ln[:c] for ln, c in zip(picked, cuts, strict=True)]
    if data.draw(st.booleans()) and len(lines) > 1:
        lines[0:2] = [lines[0] + lines[1]]  # glued
    got = decode_or_refuse("\n".join(lines).encode())
    sent = {wire.encode(wire.decode(e)) for e in picked}
    for rec in got or []:
        assert wire.encode(rec) in sent
