"""Property tests for the flops-profiler, config-dump and autotuner parsers and the file parsers.

The inputs are real DeepSpeed output from tests/data (profiles, config dumps, autotuner tables),
damaged at random: arbitrary bytes, texts cut at any character, lines cut anywhere, blocks of
two outputs interleaved line by line. Properties: nothing crashes (a file parser raises only
its own FileFormatError), and every value a record holds was printed in the input: a number is
one of the input's numbers in some unit, a string is a piece of the input, and a block cut at a
line boundary holds exactly what the whole block holds, nothing else.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lanes import examples
from locations import DATA

from dsmon.model import wire
from dsmon.model.records import (
    AutotuneExperimentRecord,
    AutotuneSummaryRecord,
    ConfigRecord,
    EventRecord,
    FlopsProfileRecord,
    ModuleProfile,
    MonitorPointRecord,
    Record,
)
from dsmon.parse import side_files as files
from dsmon.parse.base import Diagnostics
from dsmon.parse.families.autotuner import AutotunerParser
from dsmon.parse.families.config_dump import ConfigDumpParser, loads_lenient, salvage_json
from dsmon.parse.families.flops_profiler import FlopsProfilerParser
from dsmon.parse.log import LogParser
from dsmon.parse.side_files import parse_profile_file
from dsmon.parse.unparsed import UNPARSED

#: Real outputs of the three kinds: engine profiles (both layouts), dumps, autotuner tables.
SOURCES = (
    "flops_z0/train.log",
    "flops_detailed_stdout/train.log",
    "flops_detailed_file/flops_profile.txt",
    "flops_v080_resnet18/profile.txt",
    "flops_v0x_readme_megatron/profile.txt",
    "flops_v03_tutorial_lenet/profile.txt",
    "config_v03_issue679/train.log",
    "config_z2_offload/train.log",
    "autotune_gpt2_large/summary.txt",
    "autotune_tutorial/summary.txt",
)
TEXTS = {name: (DATA / name).read_text(encoding="utf-8") for name in SOURCES}
PROFILE = settings(
    max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_SCALES = (1.0, 1e3, 1e6, 1e9, 1e12, 1e15, 1e-3, 1e-6, 1e-9)
_SUMMARY = [f for f in FlopsProfileRecord.__dataclass_fields__ if f.endswith(("_ms", "_s", "_gpu"))]
_SUMMARY += ["params_total", "fwd_flops_total", "world_size", "data_parallel_size"]
_WORDS = {w: re.compile(p, re.I) for w, p in (("inf", "inf"), ("-inf", "-inf"), ("nan", "nan"))}
_MODULE = ("params", "params_pct", "macs", "macs_pct", "fwd_latency_ms", "fwd_latency_pct")


def parsers() -> list[Any]:
    return [FlopsProfilerParser(), ConfigDumpParser(), AutotunerParser()]


def parse(lines: list[str]) -> tuple[list[Record], Diagnostics]:
    """The three parsers as the log parser runs them; every record survives its wire form."""
    parser = LogParser("prop", "input.log", parsers=parsers())
    out = list(parser.feed_lines(lines))
    for rec in out:
        assert wire.decode(wire.encode(rec)) == rec
    return out, parser.diag


class Printed:
    """The numbers and text of an input, to tell a value read from it from an invented one."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.numbers = sorted({float(t) for t in _NUMBER.findall(text)})

    def has_number(self, value: float) -> bool:
        """``value`` is one of the printed numbers in some unit (``694.14 us`` -> 0.69414 ms)."""
        v = abs(value)
        if v == 0 or math.isinf(v) or math.isnan(v):
            return True  # 0, inf and nan print as themselves or as words
        return any(self._near(v / s) for s in _SCALES)

    def _near(self, x: float) -> bool:
        i = bisect.bisect_left(self.numbers, x * (1 - 1e-9))
        return i < len(self.numbers) and self.numbers[i] <= x * (1 + 1e-9)

    def check(self, value: Any, what: str) -> None:
        """Every leaf of a value (dicts and lists walked) was printed."""
        for leaf in _leaves(value):
            if isinstance(leaf, bool) or leaf is None:
                continue
            if isinstance(leaf, int | float):
                assert self.has_number(float(leaf)), f"{what}: {leaf!r} is not in the input"
            elif leaf in _WORDS:  # a non-finite number, kept as a word (Infinity, inf, NaN)
                assert _WORDS[leaf].search(self.text), f"{what}: {leaf!r} is not in the input"
            elif isinstance(leaf, str):
                assert leaf in self.text, f"{what}: {leaf!r} is not in the input"


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield k
            yield from _leaves(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def assert_from_input(rec: Record, printed: Printed) -> None:
    """No field of a record holds a value that the input did not print."""
    if isinstance(rec, FlopsProfileRecord):
        printed.check([getattr(rec, f) for f in _SUMMARY], "flops summary")
        printed.check([a.value for a in rec.top_modules], "aggregated profile")
        printed.check([a.module_class for a in rec.top_modules], "aggregated class")
        for m in rec.modules:
            printed.check([getattr(m, f) for f in _MODULE] + [m.module_class], f"module {m.path}")
    elif isinstance(rec, ConfigRecord):
        printed.check(dict(rec.config), f"{rec.origin} config")
    elif isinstance(rec, AutotuneSummaryRecord):
        printed.check([rec.tuning_space, rec.best_exp_name, rec.num_experiments], "table row")
        printed.check([rec.best_metric_val, rec.total_experiments], "table row")
    elif isinstance(rec, EventRecord) and rec.name == UNPARSED:
        assert rec.detail["count"] > 0  # dsmon's own words: how many lines it could not read
    elif isinstance(rec, EventRecord):
        assert rec.message in printed.text


def lines_of(text: str) -> list[str]:
    return text.splitlines()


# --- arbitrary input ----------------------------------------------------------------------


@PROFILE
@given(st.lists(st.binary(max_size=300), max_size=40))
def test_arbitrary_bytes_never_crash_the_log_parsers(chunks: list[bytes]) -> None:
    lines = [c.decode("utf-8", errors="replace") for c in chunks]
    recs, _ = parse(lines)
    printed = Printed("\n".join(lines))
    for rec in recs:
        assert_from_input(rec, printed)


@PROFILE
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_never_crash_the_file_parsers(raw: bytes) -> None:
    text = raw.decode("utf-8", errors="replace")
    printed = Printed(text)
    for rec in parse_profile_file(text, "prop", "profile.txt")[0]:
        assert_from_input(rec, printed)
    for row in files.parse_autotune_summary(text, "prop", "summary.txt")[0]:
        assert_from_input(row, printed)
    files.parse_csv_monitor(text, "prop", "Train_Samples_loss.csv")
    for call in (
        lambda: files.parse_ds_config(text, "prop", "ds_config.json"),
        lambda: files.parse_autotune_experiment("e", text, "prop", "e/metrics.json"),
    ):
        with contextlib.suppress(files.FileFormatError):  # the one error a whole file may raise
            call()


@PROFILE
@given(st.text(max_size=400))
def test_json_readers_raise_only_value_errors(text: str) -> None:
    with contextlib.suppress(ValueError):
        loads_lenient(text)
    salvaged = salvage_json(text.splitlines())
    assert salvaged is None or isinstance(salvaged, dict)


# --- real output, damaged -----------------------------------------------------------------


@PROFILE
@given(st.sampled_from(SOURCES), st.data())
def test_real_output_cut_at_any_character_invents_nothing(name: str, data: st.DataObject) -> None:
    text = TEXTS[name]
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    piece = text[start:end]
    recs, _ = parse(lines_of(piece))
    printed = Printed(piece)
    for rec in recs:
        assert_from_input(rec, printed)


@PROFILE
@given(st.sampled_from(SOURCES), st.data())
def test_real_lines_cut_anywhere_invent_nothing(name: str, data: st.DataObject) -> None:
    lines = lines_of(TEXTS[name])
    cuts = data.draw(st.lists(st.integers(0, 200), min_size=len(lines), max_size=len(lines)))
    damaged = [ln[:c] if c < 120 else ln for ln, c in zip(lines, cuts, strict=True)]
    recs, _ = parse(damaged)
    printed = Printed("\n".join(damaged))
    for rec in recs:
        assert_from_input(rec, printed)


@PROFILE
@given(st.sampled_from(SOURCES), st.sampled_from(SOURCES), st.randoms(use_true_random=False))
def test_two_outputs_interleaved_line_by_line_invent_nothing(a: str, b: str, rnd: Any) -> None:
    first, second = lines_of(TEXTS[a]), lines_of(TEXTS[b])
    merged: list[str] = []
    while first or second:
        source = first if second == [] or (first and rnd.random() < 0.5) else second
        merged.append(source.pop(0))
    recs, _ = parse(merged)
    printed = Printed("\n".join(merged))
    for rec in recs:
        assert_from_input(rec, printed)


#: Whole files DeepSpeed writes, with the parser of each (a record list, or one record).
FILES: dict[str, Callable[[str], list[Record]]] = {
    "flops_detailed_file/flops_profile.txt": lambda t: list(parse_profile_file(t, "p", "f")[0]),
    "autotune_gpt2_large/summary.txt": lambda t: list(files.parse_autotune_summary(t, "p")[0]),
    "autotune_deberta_fullmode/summary.txt": lambda t: list(
        files.parse_autotune_summary(t, "p")[0]
    ),
    "csv_tensorboard/csv_monitor/tiny_gpt_csv/Train_Samples_lr.csv": lambda t: list(
        files.parse_csv_monitor(t, "p", "Train_Samples_lr.csv")[0]
    ),
    "config_files/naifu_issue36_ds_config.json": lambda t: [files.parse_ds_config(t, "p")],
    "autotune_pr2711/z1_gas1_tmbspg35/metrics.json": lambda t: [
        files.parse_autotune_experiment("e", t, "p")
    ],
}
FILE_TEXTS = {name: (DATA / name).read_text(encoding="utf-8") for name in FILES}


def assert_file_record_from_input(rec: Record, printed: Printed) -> None:
    """As :func:`assert_from_input`, for the kinds only files give."""
    if isinstance(rec, MonitorPointRecord):
        printed.check([rec.samples, rec.value], "csv row")
    elif isinstance(rec, AutotuneExperimentRecord):
        printed.check([rec.fwd_ms, rec.bwd_ms, rec.step_ms, rec.latency_ms], "metrics")
        printed.check([rec.flops_per_s_per_gpu, rec.throughput_samples_per_s], "metrics")
    elif isinstance(rec, ConfigRecord) and rec.origin == "file":
        printed.check(dict(rec.config), "ds_config")
    else:
        assert_from_input(rec, printed)


@PROFILE
@given(st.sampled_from(sorted(FILES)), st.sampled_from(sorted(FILES)), st.data())
def test_damaged_files_raise_only_their_error_and_invent_nothing(
    name: str, other: str, data: st.DataObject
) -> None:
    """A file cut at any line and character, with lines of another file spliced in."""
    lines = lines_of(FILE_TEXTS[name])
    n = data.draw(st.integers(0, len(lines)))
    cut_at = data.draw(st.integers(0, 300))
    kept = lines[:n] + ([lines[n][:cut_at]] if n < len(lines) else [])
    spliced = lines_of(FILE_TEXTS[other])[: data.draw(st.integers(0, 5))]
    at = data.draw(st.integers(0, len(kept)))
    damaged = "\n".join(kept[:at] + spliced + kept[at:])
    try:
        recs = FILES[name](damaged)
    except files.FileFormatError:
        return  # a config or metrics file that is no longer JSON: named and refused
    printed = Printed(damaged)
    for rec in recs:
        assert wire.decode(wire.encode(rec)) == rec
        assert_file_record_from_input(rec, printed)


def _profile_fields(rec: FlopsProfileRecord) -> dict[str, Any]:
    return {f: getattr(rec, f) for f in _SUMMARY + ["profile_step", "bwd_factor"]}


def _is_part(part: Any, whole: Any) -> bool:
    """``part`` holds nothing ``whole`` does not: equal, or a dict with a subset of its keys."""
    if isinstance(part, Mapping) and isinstance(whole, Mapping):
        return all(k in whole and _is_part(v, whole[k]) for k, v in part.items())
    return bool(part == whole)


def _whole(name: str) -> list[Record]:
    return parse(lines_of(TEXTS[name]))[0]


@PROFILE
@given(st.sampled_from(SOURCES), st.data())
def test_blocks_cut_at_a_line_hold_a_part_of_the_whole(name: str, data: st.DataObject) -> None:
    """Cut after any line: each cut block's figures are the whole block's, flagged partial."""
    lines = lines_of(TEXTS[name])
    n = data.draw(st.integers(0, len(lines)))
    cut, diag = parse(lines[:n])
    whole = {(type(r), r.src.line, getattr(r, "origin", None)): r for r in _whole(name)}
    for rec in cut:
        ref = whole.get((type(rec), rec.src.line, getattr(rec, "origin", None)))
        if isinstance(rec, FlopsProfileRecord):
            assert ref is not None and isinstance(ref, FlopsProfileRecord)
            mine, theirs = _profile_fields(rec), _profile_fields(ref)
            assert all(v is None or v == theirs[k] for k, v in mine.items()), (mine, theirs)
            assert rec.top_modules == ref.top_modules[: len(rec.top_modules)]
            assert all(_module_part(m, ref.modules) for m in rec.modules)
            assert rec.partial or rec == ref
        elif isinstance(rec, ConfigRecord):
            assert ref is not None and isinstance(ref, ConfigRecord)
            assert _is_part(dict(rec.config), dict(ref.config))
            assert rec.partial or rec == ref
        elif isinstance(rec, AutotuneSummaryRecord):
            assert ref is not None and isinstance(ref, AutotuneSummaryRecord)
            assert (rec.tuning_space, rec.best_metric_val) == (
                ref.tuning_space,
                ref.best_metric_val,
            )
    if any(getattr(r, "partial", False) for r in cut):
        assert sum(diag.cut.values()) >= 1  # a partial record is always reported as cut


def _module_part(m: ModuleProfile, whole: tuple[ModuleProfile, ...]) -> bool:
    """A module as the whole tree has it; a container cut before its numbers line has none."""
    (w,) = [w for w in whole if w.path == m.path]
    mine, theirs = vars_of(m), vars_of(w)
    return all(v is None or v == theirs[k] for k, v in mine.items())


def vars_of(m: ModuleProfile) -> dict[str, Any]:
    return {f: getattr(m, f) for f in ModuleProfile.__dataclass_fields__}


def test_join_undone_with_a_new_wrapped_line_pending() -> None:
    """Found by the properties above (it crashed the log parser): resnet18's profile with tree
    lines cut short, so five lines were joined as one wrapped leaf, the join failed and was
    undone, and taking the lines again left a new cut line waiting for its continuation."""
    real = lines_of(TEXTS["flops_v080_resnet18/profile.txt"])
    pieces = [
        "-------------------------- DeepSpeed Flops Profiler --------------------------",
        "------------------------------ Detailed Profile per GPU ------------------------------",
        "ResNet(",
        "      (conv2): Conv2d(2.36 M, 20.18% Params,",
        "      (bn2): BatchNorm2d",
        "      (downsample): Sequential(",
        "        132.1 k, 1.13% Params, 102.76 MMACs, 0.35% MACs, 875.95 us, 1.14% latency, "
        "235.54 GFLOPS, ",
        "        (0): Conv2d(131.07 k, 1.12% Params, 102.76 MMACs, 0",
        "    )",
    ]
    assert all(any(line.startswith(p) for line in real) for p in pieces)  # real lines, cut
    (told, rec), diag = parse(pieces)
    assert isinstance(rec, FlopsProfileRecord) and rec.partial
    assert isinstance(told, EventRecord) and told.detail["count"] == 2
    # the two leaves cut inside their numbers are counted, not stored (nor stored twice)
    assert [m.path for m in rec.modules] == ["", "downsample"]
    assert rec.modules[1].params == 132.1e3  # its numbers line is whole
    assert diag.unparsed == {"flops_profile": 2}
