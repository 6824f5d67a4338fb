"""Every field excerpt (real output pasted by users, any DeepSpeed version, launcher or paste
style) parses through ``dsmon parse``'s path without an exception, and every record it makes is
one the ingest server would accept and one whose time is a real moment."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from field_logs import FIELD, field_logs, lines, needs_field_corpus, of, parse_path

from dsmon.model import wire
from dsmon.model.records import IterationRecord, LossScaleRecord
from dsmon.parse.log import parse_text
from dsmon.serve.batch import check_record

pytestmark = needs_field_corpus


def test_the_field_corpus_is_there() -> None:
    assert len(field_logs()) >= 58, f"expected the field excerpts in {FIELD}"


@pytest.mark.parametrize("path", field_logs(), ids=lambda p: p.name[:2])
def test_excerpt_parses_and_every_record_is_valid(path: Path) -> None:
    recs, diag = parse_path(path)  # an exception here fails the test
    whole_file = diag.lines == 0 and recs  # a file read whole (an autotuner metrics.json)
    if not whole_file:
        data = path.read_bytes()
        assert diag.lines == data.count(b"\n") + (not data.endswith(b"\n"))
    for rec in recs:
        check_record(rec)  # the types the record model declares
        assert wire.decode(wire.encode(rec)) == rec
        if rec.ts is not None:
            datetime.fromisoformat(rec.ts)  # never an impossible date


def test_an_impossible_logger_date_is_dropped_and_counted() -> None:
    """Excerpt 26's first overflow line with the date the issue reports (2026-19-39): the
    message is read, the date is not stored, the line is counted naming the field."""
    real = lines(26)[1]
    assert real.startswith("[2024-09-11 17:52:18,030]")
    recs, diag = parse_text(real.replace("2024-09-11", "2026-19-39"), file="x.log")
    (rec,) = of(recs, LossScaleRecord)
    assert rec.ts is None and rec.attempted_scale == 4294967296
    assert diag.unparsed == {"timestamp": 1}
    assert diag.examples["timestamp"] == ["x.log:1: field 'ts': 2026-19-39 17:52:18"]


def test_an_impossible_time_in_an_ezpz_header_is_dropped() -> None:
    real = lines(17)[2]  # "    [2025-11-10 09:43:36,161992][I][megatron/training_log:..."
    recs, diag = parse_text(real.replace("09:43:36", "25:61:36"))
    (it,) = of(recs, IterationRecord)
    assert it.iteration == 136004 and it.ts is None
    assert diag.unparsed == {"timestamp": 1}
