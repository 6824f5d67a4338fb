"""The flops profiler's own ``output_file``: every profile DeepSpeed wrote there, as records.

Apart from :mod:`dsmon.parse.flops_profiler` (the block parser) because reading a whole file
runs the log parser over it, and the log parser runs the block parser: kept in one module
they imported each other.
"""

from __future__ import annotations

from dataclasses import replace

from dsmon.model.records import FlopsProfileRecord
from dsmon.parse.base import Diagnostics
from dsmon.parse.flops_profiler import FlopsProfilerParser
from dsmon.parse.log import LogParser


def parse_profile_file(
    text: str, run: str, file: str | None, node: str | None = None
) -> tuple[list[FlopsProfileRecord], Diagnostics]:
    """Parse the whole text of a profiler ``output_file``.

    DeepSpeed rewrites that file on every profile, so its byte position is no identity: each
    record's ``src.sub`` is the block's ``profile_step`` (a rewrite at another step is a new
    record, a re-read of the same one is not), and ``step`` is the profile step, as the file
    has no step clock of its own.
    """
    parser = LogParser(run, file, node, parsers=[FlopsProfilerParser()])
    found = list(parser.feed_lines(text.splitlines()))
    return [_file_record(r) for r in found if isinstance(r, FlopsProfileRecord)], parser.diag


def _file_record(rec: FlopsProfileRecord) -> FlopsProfileRecord:
    """Key a record from the rewritten output file by its profile step (see above).

    A cut read (the file caught mid-write) is keyed apart from the whole one, ``-1 - step``,
    so the complete profile read later is stored beside it rather than refused as a repeat.
    """
    step = rec.profile_step
    sub = step or 0
    src = replace(rec.src, offset=None, sub=-1 - sub if rec.partial else sub)
    return replace(rec, src=src, step=step)
