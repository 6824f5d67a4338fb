"""MemoryParser on real ``see_memory_usage`` blocks: 0.19.8 prints and v0.3 logger lines.

Expected values were read by hand from the files in tests/data (each folder's README.md says
where its lines come from).
"""

from __future__ import annotations

import dataclasses

from locations import DATA

from dsmon.model.records import MemoryRecord, Record
from dsmon.parse.log import LogParser

GIB = 1024**3


def lines_of(rel: str) -> list[str]:
    return (DATA / rel).read_text(encoding="utf-8").splitlines()


def parse(lines: list[str]) -> tuple[list[MemoryRecord], LogParser]:
    parser = LogParser("r", "train.log")
    recs: list[Record] = list(parser.feed_lines(lines))
    return [r for r in recs if isinstance(r, MemoryRecord)], parser


def test_memory_breakdown_blocks() -> None:
    got, parser = parse(lines_of("memory_breakdown/train.log"))
    assert len(got) == 50
    first = got[0]
    assert first == MemoryRecord(
        src=first.src,
        ts=first.ts,
        step=1,
        label="DeepSpeed Engine: After args sanity test",
        allocated_bytes=round(0.25 * GIB),
        max_allocated_bytes=round(0.25 * GIB),
        cached_bytes=round(0.25 * GIB),
        max_cached_bytes=0,
        cpu_used_bytes=round(5.48 * GIB),
        cpu_used_pct=23.3,
    )
    assert (first.src.line, first.src.rank) == (24, 0)
    labels = [r.label for r in got[2:8]]
    assert labels == [
        "Engine before forward",
        "Engine after forward",
        "Engine before backward",
        "Engine after backward",
        "Engine before step",
        "Engine after step",
    ]
    after_backward = got[5]  # lines 186-188
    assert (after_backward.src.line, after_backward.allocated_bytes) == (188, round(0.4 * GIB))
    assert after_backward.cpu_used_bytes == round(5.76 * GIB)
    assert sum(parser.diag.unparsed.values()) == 0 and sum(parser.diag.cut.values()) == 0


def test_v03_block_written_through_the_logger() -> None:
    got, _ = parse(lines_of("memory_old_versions/pr849_v03.log"))
    (rec,) = got
    assert (rec.label, rec.ts, rec.src.line) == (
        "After zero_optimizer step",
        "2021-03-10T15:27:46.895",
        3,
    )
    assert (rec.allocated_bytes, rec.max_allocated_bytes) == (round(0.06 * GIB), round(0.26 * GIB))
    assert (rec.cached_bytes, rec.max_cached_bytes) == (round(0.71 * GIB), GIB)
    assert (rec.cpu_used_bytes, rec.cpu_used_pct) == (round(62.62 * GIB), 49.8)


def test_block_without_its_cpu_line_is_counted_as_cut() -> None:
    lines = lines_of("memory_breakdown/train.log")
    block = lines[176:179]  # "Engine before forward", MA line, CPU line
    got, parser = parse(block[:2])
    assert got == [] and parser.diag.cut["memory"] == 1
    got, parser = parse([block[0], block[1], lines[199], block[2]])  # another line in between
    assert got == [] and parser.diag.cut["memory"] == 1


def test_label_must_be_the_line_right_before() -> None:
    lines = lines_of("memory_breakdown/train.log")
    timer = next(ln for ln in lines if "time (ms) | optimizer_allgather" in ln)
    got, _ = parse([lines[176], timer, lines[177], lines[178]])
    assert [r.label for r in got] == [""]  # a timer line came between label and figures


def test_wrapped_figures_lines_are_joined() -> None:
    lines = lines_of("memory_breakdown/train.log")
    block = lines[176:179]
    (ref,) = parse(block)[0]
    for j in (1, 2):
        for cut in range(1, len(block[j])):
            pieces = [*block[:j], block[j][:cut], block[j][cut:], *block[j + 1 :]]
            got, parser = parse(pieces)
            assert [dataclasses.replace(r, src=ref.src) for r in got] == [ref], (j, cut)
            assert sum(parser.diag.cut.values()) == 0
