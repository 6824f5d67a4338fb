"""The field excerpts: real DeepSpeed output that users pasted in public issues, PRs and notes.

They live in the shared corpus beside the clone (``../shared/corpus/field``, one ``NN_kind_...log``
with an ``.md`` that says where it came from). Each is read as ``dsmon parse`` reads a file:
``ingest.discover`` and ``ingest.read_found``, i.e. the LogParser with byte offsets.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

import pytest

from dsmon.load.files import read_found
from dsmon.load.kinds import discover
from dsmon.model.records import Record
from dsmon.parse.base import Diagnostics

FIELD = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus" / "field"

R = TypeVar("R", bound=Record)


#: For a module that cannot run without the excerpts: skipped on a machine whose clone has no
#: ``../shared`` beside it (a user running the README's test command), never in CI, which has it.
needs_field_corpus = pytest.mark.skipif(
    not FIELD.is_dir() and not os.environ.get("CI"),
    reason=f"no field corpus at {FIELD} (../shared beside the clone)",
)


def field_logs() -> list[Path]:
    """Every excerpt, in number order."""
    return sorted(FIELD.glob("[0-9][0-9]_*.log"))


def field_path(number: int) -> Path:
    """The excerpt with this number (``7`` -> ``07_megatron_...log``)."""
    found = sorted(FIELD.glob(f"{number:02d}_*.log"))
    if len(found) != 1:
        message = f"field excerpt {number:02d} not found in {FIELD}"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI has the shared folder beside the clone: never skip there
        pytest.skip(message)
    return found[0]


def parse_path(path: Path) -> tuple[list[Record], Diagnostics]:
    """Records and diagnostics of one file, as ``dsmon parse`` makes them."""
    diag = Diagnostics()
    (found,) = discover(path)
    return list(read_found(found, "field", diag)), diag


def parse_field(number: int) -> tuple[list[Record], Diagnostics]:
    """Records and diagnostics of one excerpt."""
    return parse_path(field_path(number))


def of(records: list[Record], cls: type[R]) -> list[R]:
    """The records of one class, in order."""
    return [r for r in records if isinstance(r, cls)]


def lines(number: int) -> list[str]:
    """The excerpt's physical lines (1-based: ``lines(n)[k - 1]`` is line k)."""
    return field_path(number).read_text(encoding="utf-8").split("\n")
