"""Parsers: pure code from DeepSpeed's text output to records (no I/O here)."""

from dsmon.parse.log import LogParser, default_parsers, parse_text

__all__ = ["LogParser", "default_parsers", "parse_text"]
