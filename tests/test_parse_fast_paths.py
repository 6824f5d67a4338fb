"""The parser's fast paths answer exactly what the slower code they stand for answers.

``dsmon parse`` speed comes from cheap tests run before (or instead of) a costly one; each is
checked here against the original on every line of the real logs the tests have: the runs
in tests/data and the field excerpts users pasted (when ../shared is beside the clone).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from field_logs import FIELD

from dsmon.parse import lines, pyrepr, timers

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


def test_timer_fields_read_as_the_whole_line_regex_reads_them() -> None:
    """Every timer line of the real logs: split per field == check whole body, then find all."""
    body_rx = re.compile(
        rf"(?:\s*{timers._NAME}: (?:{timers._VAL})\s*\|)*\s*{timers._NAME}: (?:{timers._VAL})\s*"
    )
    pair_rx = re.compile(rf"\s*({timers._NAME}): ({timers._VAL})\s*(?:\||$)")
    bodies = [
        m.group(2) or ""
        for text in real_lines()
        if "time (ms)" in text
        and (m := timers._HEAD.match(text[text.index("time (ms)") :])) is not None
    ]
    # with each body cut short at every length: wrapped lines are what the check is for
    cuts = [body[:n] for body in bodies[:200] for n in range(len(body))]
    assert len(bodies) > 500
    for body in bodies + cuts:
        if body_rx.fullmatch(body) is None:
            want = None
        else:
            pairs = pair_rx.findall(body)
            want = (tuple(timers._rejoin(n) for n, _ in pairs), [float(v) for _, v in pairs])
        assert timers._fields(body) == want, body
