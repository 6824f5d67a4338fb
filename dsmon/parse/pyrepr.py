"""Reading values that DeepSpeed printed with Python's ``str()``, without evaluating anything.

The config dump prints each attribute as ``str(value)``: ``True``, ``1e-05``, ``torch.float16``,
dict reprs, pydantic models as ``k=v k=v`` (nested ones as ``Name(k=v, ...)``), pydantic v1's
``500,000,000`` and ``sys.maxsize``, and objects as ``<... object at 0x...>``. ``ast.literal_eval``
rejects most of these, so this small reader turns what it can into plain Python values (dicts,
lists, numbers, strings) and keeps anything else as the text that was printed.
"""

from __future__ import annotations

import ast
import re
import sys
from typing import Any

_KV_START = re.compile(r"[A-Za-z_]\w*=(?!=)")
_STRING = re.compile(r"""[rbuRBU]?('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")
_GROUPED_INT = re.compile(r"-?\d{1,3}(?:,\d{3})+(?![\d.])")
_BARE = re.compile(r"[^\s,()\[\]{}:<>'\"=]+")
_INT = re.compile(r"[-+]?\d+")
_CLOSE = {"(": ")", "[": "]", "{": "}"}
_WORDS: dict[str, Any] = {
    "True": True,
    "False": False,
    "None": None,
    "sys.maxsize": sys.maxsize,
    "inf": float("inf"),
    "-inf": float("-inf"),
    "nan": float("nan"),
}


class ReprError(ValueError):
    """The text is not a value this reader understands."""


def scalar(token: str) -> Any:
    """A bare word as Python prints it: bool, None, int, float, else the word itself."""
    if token in _WORDS:
        return _WORDS[token]
    if _INT.fullmatch(token):
        return int(token)
    if _GROUPED_INT.fullmatch(token):
        return int(token.replace(",", ""))
    try:
        return float(token)
    except ValueError:
        return token


def _string(quoted: str) -> str:
    """A quoted string literal's text; only one with escapes needs Python's own reader.

    Most printed strings (``'adam'``, ``'cpu'``) have none, and compiling each with
    ``ast.literal_eval`` was most of the time a config dump takes to read.
    """
    if "\\" not in quoted:
        return quoted[1:-1]
    return str(ast.literal_eval(quoted))


class _Reader:
    """Recursive-descent reader over one printed value."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def skip(self) -> None:
        while self.i < len(self.s) and self.s[self.i].isspace():
            self.i += 1

    def peek(self) -> str:
        self.skip()
        return self.s[self.i] if self.i < len(self.s) else ""

    def expect(self, ch: str) -> None:
        if self.peek() != ch:
            raise ReprError(f"expected {ch!r} at column {self.i + 1}")
        self.i += 1

    def value(self) -> Any:
        ch = self.peek()
        if ch in _CLOSE:
            return self.container(ch)
        if ch == "<":
            return self.angle()
        m = _STRING.match(self.s, self.i)
        if m:
            self.i = m.end()
            return _string(m.group(1))
        m = _GROUPED_INT.match(self.s, self.i) or _BARE.match(self.s, self.i)
        if m is None:
            raise ReprError(f"unexpected {ch!r} at column {self.i + 1}")
        self.i = m.end()
        if self.i < len(self.s) and self.s[self.i] == "(":
            return self.call(m.start())
        return scalar(m.group(0))

    def angle(self) -> str:
        """``<deepspeed...Config object at 0x7f...>`` and the like: kept as printed."""
        start, depth = self.i, 0
        while self.i < len(self.s):
            c = self.s[self.i]
            self.i += 1
            depth += {"<": 1, ">": -1}.get(c, 0)
            if depth == 0:
                return self.s[start : self.i]
        raise ReprError("unclosed '<'")

    def container(self, open_ch: str) -> Any:
        """A dict, list or tuple (tuples become lists, as JSON would have them)."""
        close = _CLOSE[open_ch]
        self.i += 1
        items: list[Any] = []
        pairs: dict[Any, Any] = {}
        while self.peek() != close:
            item = self.value()
            if open_ch == "{":
                self.expect(":")
                pairs[item] = self.value()
            else:
                items.append(item)
            if self.peek() != ",":
                break
            self.i += 1
        self.expect(close)
        return pairs if open_ch == "{" else items

    def call(self, start: int) -> Any:
        """``Name(k=v, ...)``: a nested model, as a dict; with positional arguments, as text."""
        self.i += 1
        out: dict[str, Any] = {}
        positional = False
        while self.peek() != ")":
            m = _KV_START.match(self.s, self.i)
            if m:
                self.i = m.end()
                out[m.group(0)[:-1]] = self.value()
            else:
                positional = True
                self.value()
            if self.peek() != ",":
                break
            self.i += 1
        self.expect(")")
        return self.s[start : self.i] if positional else out

    def pairs(self) -> dict[str, Any]:
        """Top-level ``k=v k=v``: how pydantic's ``str()`` prints a model."""
        out: dict[str, Any] = {}
        while self.peek():
            m = _KV_START.match(self.s, self.i)
            if m is None:
                raise ReprError(f"expected name= at column {self.i + 1}")
            self.i = m.end()
            out[m.group(0)[:-1]] = self.value()
        return out


def parse_value(text: str) -> Any:
    """The Python value behind a printed one, or the stripped text when it cannot be read."""
    s = text.strip()
    if not s:
        return ""
    if _BARE.fullmatch(s):  # one word (True, 1e-05, torch.float16): what most lines print
        return scalar(s)
    reader = _Reader(s)
    try:
        if _KV_START.match(s):
            return reader.pairs()
        value = reader.value()
        if reader.peek():
            return s
        return value
    except (ReprError, ValueError, SyntaxError, TypeError, RecursionError):
        return s
