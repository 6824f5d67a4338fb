"""The parser's fast paths answer exactly what the slower code they stand for answers.

``dsmon parse`` speed comes from cheap tests run before (or instead of) a costly one; each is
checked here against the original on every line of the real logs the tests have: the runs
in tests/data and the field excerpts users pasted (when ../shared is beside the clone).
"""

from __future__ import annotations

import ast
from pathlib import Path

from field_logs import FIELD

from dsmon.parsers import lines, pyrepr

DATA = Path(__file__).parent / "data"
LOGS = sorted(DATA.glob("**/*.log")) + sorted(FIELD.glob("*.log"))


def real_lines() -> list[str]:
    out: list[str] = []
    for path in LOGS:
        for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
            out.extend(part for part in raw.split("\r") if part)
    return out


def test_embedded_line_test_agrees_with_the_regex_on_every_real_line() -> None:
    all_lines = real_lines()
    assert len(all_lines) > 5000
    found = 0
    for text in all_lines:
        want = lines._EMBEDDED.search(text, 1) is not None
        assert lines.has_embedded(text) == want, text
        found += want
    assert found > 0  # the corpus holds glued lines: both answers were exercised


def test_quoted_strings_read_as_python_reads_them() -> None:
    """Every quoted literal of the real logs (config dump values among them)."""
    quoted = [m.group(1) for text in real_lines() for m in pyrepr._STRING.finditer(text)]
    assert len(quoted) > 1000
    for q in quoted:
        try:
            want = ast.literal_eval(q)
        except (ValueError, SyntaxError):
            continue
        assert pyrepr._string(q) == want
