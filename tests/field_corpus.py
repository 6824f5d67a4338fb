"""The field corpus for the tests: verbatim DeepSpeed output that users pasted in public issues.

The excerpts live in ``../shared/corpus/field/`` beside the clone (``NN_<kind>_<year>_<what>.log``
with a ``.md`` naming the source). :func:`dsmon_parse` runs ``dsmon parse`` on one, exactly as a
user would, and decodes what it printed, so a test checks the whole path: file classification,
line cleaning, the parsers and the JSON-lines form. Without the shared folder the tests that need
it are skipped on a developer's machine and fail in CI (``CI`` set).
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from typing import TypeVar

from field_logs import field_path

from cli import main as cli
from dsmon.model import wire
from dsmon.model.records import Record

R = TypeVar("R", bound=Record)


@dataclass(frozen=True)
class Parsed:
    """What ``dsmon parse`` printed for one excerpt: the records and the stderr summary."""

    records: list[Record]
    report: str

    def of(self, cls: type[R]) -> list[R]:
        """The records of one kind, in file order."""
        return [r for r in self.records if isinstance(r, cls)]

    def one(self, cls: type[R]) -> R:
        """The single record of one kind."""
        (rec,) = self.of(cls)
        return rec


def dsmon_parse(number: int) -> Parsed:
    """Run ``dsmon parse`` on an excerpt; its stdout decoded into records."""
    path = field_path(number)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["parse", "--run", "field", str(path)])
    assert code == 0, err.getvalue()
    records = [wire.decode(line) for line in out.getvalue().splitlines()]
    return Parsed(records, err.getvalue())
