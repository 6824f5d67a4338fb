"""The parser's fast paths answer exactly what the slower code they stand for answers.

``dsmon parse`` speed comes from cheap tests run before (or instead of) a costly one; each is
checked here against the original on every line of the real logs the tests have: the runs
in tests/data and the field excerpts users pasted (when ../shared is beside the clone).
"""

from __future__ import annotations

import ast
import re

from field_logs import FIELD
from locations import DATA

from dsmon.parse import base, lines, pyrepr
from dsmon.parse.families import events, loss_scale, timers
from dsmon.parse.families import timers as timer_shapes

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
    bodies = _timer_bodies()
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


def _timer_bodies() -> list[str]:
    return [
        m.group(2) or ""
        for text in real_lines()
        if "time (ms)" in text
        and (m := timers._HEAD.match(text[text.index("time (ms)") :])) is not None
    ]


def test_known_timer_shapes_read_as_the_field_by_field_path_reads_them() -> None:
    """Shapes learnt from every real timer body, then every body (and cut ones) matched."""
    bodies = _timer_bodies()
    cache = timer_shapes.ShapeCache(timers._FIELD, timers._VAL)
    for body in bodies:
        fields = timers._fields(body)
        if fields is not None:
            cache.learn(body, fields[0])
    cuts = [body[:n] for body in bodies[:200] for n in range(len(body))]
    hits = 0
    for body in bodies + cuts:
        got = cache.match(body)
        if got is not None:
            hits += 1
            assert got == timers._fields(body), body
    assert hits > 500  # most real bodies have a known shape: the fast path was exercised


def test_word_tests_answer_as_the_regexes_they_replace() -> None:
    """``contains_any`` over each word list == the ``|``-joined regex it stands for."""
    replaced = {
        events.EVENT_WORDS: r"DeepSpeed info: |Initializing TorchBackend|WORLD INFO DICT|nnodes="
        r"|dist_world_size=|Optimizer = |ZeRO stage|exits |Killing subprocess|bucket size"
        r"|persistent param|terminate called|allocator cache flushes"
        r"|failed \(exitcode: |closing signal|Main process received|death signal"
        r"|dsmon run: the job ended with status|STAGE_PARAMS=",
        events._FAILURE_WORDS: r"out of memory|OutOfMemoryError|NCCL",
        loss_scale._KEYWORDS: r"verflow|OVERFLOW|oss scal|ysteresis|dynamic loss",
    }
    all_lines = real_lines()
    for words, pattern in replaced.items():
        rx = re.compile(pattern)
        found = 0
        for text in all_lines:
            want = rx.search(text) is not None
            assert base.contains_any(text, words) == want, text
            found += want
        assert found > 0, pattern


def test_prefix_regexes_skipped_by_first_character_never_match_there() -> None:
    """The launcher and logger regexes a line's first character rules out match no real line."""
    bracket_only = (lines._TEE, lines._MPI_TAG, lines._KUBE_PREFIX)
    skipped = 0
    for text in real_lines():
        first = text[:1]
        if first != "[":
            assert not any(rx.match(text) for rx in bracket_only), text
            assert not any(rx.match(text) for rx in lines._LOGGERS), text
        if first == "[" or not first.isalnum():
            assert lines._HOST.match(text) is None, text
        if first != "[" and not first.isalnum():
            assert lines._STAMPED_HOST.match(text) is None, text
            skipped += 1
        if first == "[" and not text[1:2].isdigit():
            assert not any(rx.match(text) for rx in lines._DATED_LOGGERS), text
        if first == "[" and text[1:2].isdigit():
            assert not any(rx.match(text) for rx in lines._LEVEL_LOGGERS), text
    assert skipped > 1000


def test_timer_shapes_are_bounded_per_first_name_and_in_all() -> None:
    """A log whose timer lines keep changing shape costs each line a bounded number of tries."""
    readable = [b for b in _timer_bodies() if timers._fields(b) is not None]
    body = max(readable, key=lambda b: b.count("|"))
    parts = body.split("|")
    assert len(parts) >= 4
    # the same first field with ever more fields after it, each spacing of its separators
    variants = {
        ("|" + " " * gap).join(parts[:n]) for n in range(1, len(parts) + 1) for gap in range(4)
    }
    cache = timer_shapes.ShapeCache(timers._FIELD, timers._VAL)
    for variant in sorted(variants):
        fields = timers._fields(variant)
        assert fields is not None, variant
        cache.learn(variant, fields[0])
        assert cache.match(variant) in (None, fields)
    assert len(variants) > timer_shapes.MAX_PER_HEAD
    (shapes,) = cache._by_head.values()
    assert len(shapes) == timer_shapes.MAX_PER_HEAD
    for i in range(2 * timer_shapes.MAX_SHAPES):  # distinct first names: the total is capped
        other = f" name{i}: 1.00"
        cache.learn(other, (f"name{i}",))
    assert sum(len(s) for s in cache._by_head.values()) == timer_shapes.MAX_SHAPES
