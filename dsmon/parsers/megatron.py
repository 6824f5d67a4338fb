"""Placeholder for the MegatronParser (being written)."""

from __future__ import annotations

from dsmon.parsers.base import ParseContext
from dsmon.parsers.lines import LogLine
from dsmon.records import Record


class MegatronParser:
    """Not yet implemented: claims no line."""

    in_block = False

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """Claims nothing yet."""
        return None

    def finish(self, ctx: ParseContext) -> list[Record]:
        """Nothing pending."""
        return []
