"""No line stops a log (issue 41, case 2): a value no record can hold, or a parser that raises.

tests/data/megatron_poison_line is real Megatron-DeepSpeed output with ``nan``, ``inf`` and
``1e400`` put into its memory and iteration lines (its README says where). Each once raised in
the Megatron parser, so ``dsmon parse`` and ``dsmon import`` stored nothing of the file and a
collector read the line again at every poll, for ever. Now such a value is left out of its
record and counted, and a parser that raises on a line costs that line only, on every path:
the log parser, ``dsmon parse``/``import``, the collector's follower.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from locations import DATA

from cli.main import main
from collectors.tail.follower import FileFollower
from collectors.tail.tailer import Tailer
from dsmon.load.files import read_found
from dsmon.load.kinds import discover
from dsmon.model.records import IterationRecord, MemoryRecord, Record
from dsmon.model.wire import encode
from dsmon.parse.base import OUT_OF_RANGE, PARSER_ERROR, Diagnostics, ParseContext
from dsmon.parse.lines import LogLine
from dsmon.parse.log import LogParser, default_parsers
from dsmon.store.store import open_store

POISON = DATA / "megatron_poison_line"
LOG = POISON / "megatron.log"
MIB = 1 << 20


def poison_records() -> tuple[list[Record], Diagnostics]:
    diag = Diagnostics()
    (found,) = [f for f in discover(POISON) if f.kind == "log"]
    return list(read_found(found, "poison", diag)), diag


def test_nan_inf_and_overflow_are_left_out_and_the_rest_kept() -> None:
    recs, diag = poison_records()
    mem = {r.src.line: r for r in recs if isinstance(r, MemoryRecord)}
    assert len(mem) == 20  # every memory line of the excerpt, the poisoned ones too
    assert mem[12].allocated_bytes is None  # "allocated: nan"
    assert mem[12].max_allocated_bytes == round(17461.94775390625 * MIB)
    assert mem[13].cached_bytes is None and mem[13].allocated_bytes is not None  # "inf"
    assert mem[14].max_cached_bytes is None and mem[14].cached_bytes == 19216 * MIB  # "1e400"
    its = [r for r in recs if isinstance(r, IterationRecord)]
    assert [r.iteration for r in its] == [1, 2, 3]
    second = its[1]
    assert second.loss is not None and math.isnan(second.loss)  # DeepSpeed's own: a gap
    assert second.losses == {}  # a map holds no NaN on the wire
    assert second.nan_iterations is None and second.consumed_samples == 2048
    assert diag.unparsed == {OUT_OF_RANGE: 4}
    assert diag.examples[OUT_OF_RANGE][0] == "megatron.log:12: field 'allocated_bytes': nan"


class RaisesOn:
    """A sub-parser with a fault: it raises on every line holding ``word``."""

    in_block = False

    def __init__(self, word: str) -> None:
        self.word = word
        self.calls = 0

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        if self.word in line.text:
            self.calls += 1
            raise ZeroDivisionError("a fault of the parser")
        return None

    def finish(self, ctx: ParseContext) -> list[Record]:
        raise KeyError("finish")


def test_a_parser_that_raises_costs_its_line_only() -> None:
    lines = LOG.read_text(encoding="utf-8").splitlines()
    faulty = RaisesOn("(after 1 iterations)")
    parser = LogParser("r", "megatron.log", parsers=[faulty, *default_parsers()])
    recs = list(parser.feed_lines(lines))
    assert faulty.calls == 20
    assert not [r for r in recs if isinstance(r, MemoryRecord)]  # the lines it raised on
    assert [r.iteration for r in recs if isinstance(r, IterationRecord)] == [1, 2, 3]
    assert parser.diag.unparsed[PARSER_ERROR] == 20 + 1  # each line, and finish()
    assert parser.diag.examples[PARSER_ERROR][0].startswith(
        "megatron.log:10: RaisesOn raised ZeroDivisionError: a fault of the parser | (after 1 "
    )


@pytest.mark.parametrize("command", ["parse", "import"])
def test_parse_and_import_read_the_whole_file(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "s.sqlite"
    extra = ["--store", str(store)] if command == "import" else []
    assert main([command, str(LOG), "--run", "poison", *extra]) == 0
    out = capsys.readouterr()
    want, _ = poison_records()
    if command == "parse":
        assert len(out.out.splitlines()) == len(want)
        assert "value out of range: 4" in out.err
    else:
        with open_store(store) as s:
            assert len(list(s.records("poison"))) == len(want)


def test_the_collector_passes_a_line_its_parser_raises_on(tmp_path: Path) -> None:
    """The follower moves past the line whatever the parser does: it is never read again, and
    the lines after it (and the good line before it, read in the same poll) are delivered."""

    class Brittle(LogParser):
        fed: list[int] = []

        def feed(
            self, raw: str, offset: int | None = None, line: int | None = None
        ) -> list[Record]:
            self.fed.append(line or 0)
            if "allocated: nan" in raw:
                raise ValueError("cannot convert float NaN to integer")
            return super().feed(raw, offset, line)

    log = tmp_path / "train.log"
    text = LOG.read_bytes()
    cut = text.index(b"[Rank 9]")  # just after the poisoned line 12
    log.write_bytes(text[:cut])
    follower = FileFollower(str(log), lambda label: Brittle("r", label, live=True))
    first = follower.poll()
    assert {r.src.line for r in first if isinstance(r, MemoryRecord)} == set(range(10, 12))
    with log.open("ab") as f:
        f.write(text[cut:])
    later = follower.poll() + follower.poll()
    assert Brittle.fed.count(12) == 1  # read once, never again
    imported, _ = poison_records()
    assert {r.src.line for r in later if isinstance(r, MemoryRecord)} == {
        r.src.line for r in imported if isinstance(r, MemoryRecord) and (r.src.line or 0) > 12
    }
    assert [r.iteration for r in later if isinstance(r, IterationRecord)] == [1, 2, 3]


def test_the_collector_reads_the_poisoned_log_as_import_does(tmp_path: Path) -> None:
    tailer = Tailer([str(LOG)], run="poison")
    live = tailer.poll(final=True).records + tailer.release()
    imported, _ = poison_records()
    stored = {(r.src.line, r.src.sub, r.KIND): r for r in live}
    assert [encode(r) for r in stored.values()] == [encode(r) for r in imported]  # nan: null
