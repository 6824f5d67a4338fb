"""Every field excerpt (real output pasted by users, any DeepSpeed version, launcher or paste
style) parses through ``dsmon parse``'s path without an exception, and every record it makes is
one the ingest server would accept and one whose time is a real moment."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from field_logs import FIELD, field_logs, parse_path

from dsmon import wire
from dsmon.ingest_batch import check_record


def test_the_field_corpus_is_there() -> None:
    assert len(field_logs()) == 58, f"expected the 58 field excerpts in {FIELD}"


@pytest.mark.parametrize("path", field_logs(), ids=lambda p: p.name[:2])
def test_excerpt_parses_and_every_record_is_valid(path: Path) -> None:
    recs, diag = parse_path(path)  # an exception here fails the test
    assert diag.lines == path.read_bytes().count(b"\n") + (not path.read_bytes().endswith(b"\n"))
    for rec in recs:
        check_record(rec)  # the types the record model declares
        assert wire.decode(wire.encode(rec)) == rec
        if rec.ts is not None:
            datetime.fromisoformat(rec.ts)  # never an impossible date
