"""A DeepSpeed or Megatron line is read wherever it starts, behind any logger header.

Each real line (tests/data and the field corpus; their READMEs name the sources) is parsed on
its own, then behind headers dsmon has no pattern for (a training script's logger, a job
runner's stamp, a pasted quote): the records must be the same, with the header's time where it
has one. Look-alikes stay apart behind a header as they do at the start of a line, and a line
with a kind's tokens that no parser reads is counted under that kind, never dropped silently.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from field_logs import lines as field_lines
from field_logs import needs_field_corpus
from locations import DATA

from dsmon.model.records import IterationRecord, MemoryRecord, Record, TimerRecord
from dsmon.parse.lines import LineCleaner
from dsmon.parse.log import parse_text
from dsmon.parse.signatures import find

#: Headers nobody taught dsmon, each with the time it names (None: it names none).
HEADERS: dict[str, tuple[str, str | None]] = {
    "ezpz 2024": ("[2024-04-21 02:45:08][INFO][training:1251] - ", "2024-04-21T02:45:08.000"),
    "loguru": ("2024-04-21 02:45:08.123 | INFO     | __main__:train:42 - ", "2024-04-21T02:45:08.123"),
    "logging default": ("INFO:root:", None),
    "transformers logger": ("04/21/2024 02:45:08 - INFO - __main__ - ", "2024-04-21T02:45:08.000"),
    "glog": ("I0421 02:45:08.123456 12345 train.py:42] ", None),
    "host, then time": ("node001 [2024-04-21 02:45:08] ", "2024-04-21T02:45:08.000"),
    "upper-case rank": ("[RANK 3] ", None),
    "time of day": ("[02:45:08] ", None),
    "kubectl --timestamps": ("2024-01-02T03:04:05.123456789Z ", None),
    "pasted quote of an ezpz line": ("> [2024-04-21 02:45:08][INFO][x:1] - ", "2024-04-21T02:45:08.000"),
}  # fmt: skip


def message(path: Path, contains: str) -> str:
    """The message of the first line of a real log holding ``contains``, its headers taken off."""
    for raw in path.read_text().splitlines():
        if contains in raw:
            return LineCleaner().clean(raw, 1)[0].text
    raise AssertionError(f"no {contains!r} in {path}")


#: One real message of each one-line kind (the kind as unparsed counts name it).
MESSAGES = {
    "timer": message(DATA / "probe_torchrun/train.log", "time (ms) | fwd:"),
    "step": message(DATA / "events_crash_rank1_step17/train.log", "] step="),
    "throughput": message(DATA / "events_crash_rank1_step17/train.log", "RunningAvgSamplesPerSec"),
    "loss_scale": message(DATA / "fp16_zero2/train.log", "OVERFLOW! Rank"),
    "megatron_iteration": message(DATA / "megatron_lm_issues/epfllm_issue11.log", " iteration "),
    "iteration": message(DATA / "probe_pipeline/train.log", "steps: "),
    "comm_op": message(DATA / "comms_v07_docs/comms.log", "comm op:"),
    "pipeline_stage": message(DATA / "events_pipeline_wallclock_crash/train.log", "STAGE_PARAMS"),
    "old_timer": message(DATA / "timers_old_versions/issue1436_v05.log", "rank=0 time (ms)"),
}


def without_place(recs: list[Record]) -> list[Record]:
    """Records without what a header may change: where they were read, and when."""
    return [
        dataclasses.replace(r, src=dataclasses.replace(r.src, rank=None, node=None), ts=None)
        for r in recs
    ]


@pytest.mark.parametrize("kind", sorted(MESSAGES))
@pytest.mark.parametrize("header", sorted(HEADERS))
def test_a_line_behind_any_header_reads_as_the_line_alone(kind: str, header: str) -> None:
    text = MESSAGES[kind]
    alone, clean = parse_text(text)
    assert alone and not clean.unparsed
    prefix, ts = HEADERS[header]
    behind, diag = parse_text(prefix + text)
    assert without_place(behind) == without_place(alone)
    assert not diag.unparsed
    assert all(r.ts == ts for r in behind)


def test_the_issue_ezpz_header_gives_every_iteration_line() -> None:
    """ezpz's 2024 header (no milliseconds, the level in brackets) before Megatron-DeepSpeed's
    ``iteration=`` line: the AuroraGPT log's line is read, with the header's time."""
    raw = (DATA / "flops_auroragpt_exponents/train.log").read_text().splitlines()[103]
    assert raw.startswith("[2024-04-19 13:30:54][INFO][training:1251] -  iteration=       5/")
    (it,), diag = parse_text(raw)
    assert isinstance(it, IterationRecord) and not diag.unparsed
    assert (it.iteration, it.total_iterations, it.consumed_tokens) == (5, 10000, 23592960)
    assert (it.elapsed_ms, it.ts) == (62925.6, "2024-04-19T13:30:54.000")


@needs_field_corpus
def test_megatron_memory_line_behind_a_header_keeps_its_rank() -> None:
    """Excerpt 05's ``[Rank 51] (after 1 iterations) memory (MB) | ...`` behind an ezpz header."""
    raw = next(ln for ln in field_lines(5) if ln.startswith("[Rank 51] (after 1 iterations)"))
    (alone,), _ = parse_text(raw)
    (behind,), diag = parse_text(HEADERS["ezpz 2024"][0] + raw)
    assert isinstance(behind, MemoryRecord) and not diag.unparsed
    assert behind.src.rank == alone.src.rank == 51
    assert behind.allocated_bytes == alone.allocated_bytes and behind.step == 1


def test_megatron_min_max_block_behind_a_header() -> None:
    """Megatron-DeepSpeed's ``(min, max) time across ranks (ms):`` head behind a header, its
    rows as Megatron prints them (one string with newlines: no header of their own)."""
    lines = (DATA / "megatron_ds095_llama/train.log").read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if "(min, max) time across ranks" in ln)
    block = [lines[at]] + [ln for ln in lines[at + 1 : at + 20] if ln.startswith("    ")]
    alone, _ = parse_text("\n".join(block))
    behind, diag = parse_text("\n".join([HEADERS["loguru"][0] + block[0], *block[1:]]))
    (timer,) = behind
    assert isinstance(timer, TimerRecord) and timer.group == "megatron"
    assert without_place(behind) == without_place(alone) and not diag.unparsed


@pytest.mark.parametrize(
    ("raw", "group"),
    [
        # activation checkpointing's one-field line is no engine step
        (message(DATA / "act_ckpt/train.log", "time (ms) | fwd:"), "act_ckpt"),
        # Megatron's own timers in DeepSpeed's format (names of its own)
        (message(DATA / "timers_old_versions/issue3742_v09.log", "batch generator"), "megatron"),
    ],
)
def test_look_alikes_stay_apart_behind_a_header(raw: str, group: str) -> None:
    for prefix, _ in HEADERS.values():
        (rec,), diag = parse_text(prefix + raw)
        assert isinstance(rec, TimerRecord) and rec.group == group and not diag.unparsed


def test_a_known_kind_no_parser_reads_is_counted_under_its_kind() -> None:
    """A pipeline-stage line cut before its totals and a throughput line with an unreadable
    figure, behind an ezpz header: no record, and each counted by kind with the line."""
    stage = MESSAGES["pipeline_stage"].partition(" TOTAL_PARAMS")[0]
    tput = MESSAGES["throughput"].replace("CurrSamplesPerSec=", "CurrSamplesPerSec=fast")
    prefix = HEADERS["ezpz 2024"][0]
    recs, diag = parse_text(f"{prefix}{stage}\n{prefix}{tput}\n", file="x.log")
    assert [r.name for r in recs] == ["unparsed", "unparsed"]  # told, no record of their own
    assert diag.unparsed == {"pipeline_stage": 1, "throughput": 1}
    assert diag.examples["pipeline_stage"] == [f"x.log:1: {prefix}{stage}"]


@pytest.mark.parametrize("kind", sorted(MESSAGES))
def test_each_real_line_carries_its_signature(kind: str) -> None:
    text = MESSAGES[kind]
    found = find("some prefix " + text)
    assert found is not None and found[1] == len("some prefix ") + len(text) - len(text.lstrip())
    assert found[0] == ("timer" if kind == "old_timer" else kind)


def test_lines_without_a_signature_find_none() -> None:
    """Prose that names the kinds is no line of them (the quick word test passes, the regex not)."""
    for text in (
        "the step= line says skipped steps",
        "iteration 5 done",
        "time (ms) of each phase",
        "Flops Profiler disabled",
        "DeepSpeed is great",
    ):
        assert find(text) is None, text
