"""Text that comes from the run is shown as typed, never rendered as Markdown.

A run name (or a log line) holding ``![x](http://host/x.png)`` would make every viewer's
browser fetch that address; ``[here](http://...)`` would become a link in a heading.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from dashboard_support import app_at
from shared_fixtures import DATA

from dsmon.load.files import import_paths
from dsmon.store.store import open_store
from ui.text import NO_LINK, md_escape

NASTY = "run ![x](http://127.0.0.1:9/x.png) [here](http://127.0.0.1:9/) *b* `c` <img src=y>"


#: Bare text GitHub's Markdown makes a link of (and Streamlit with it), escaped or not.
BARE_LINKS = ["see http://127.0.0.1:9/x", "HTTPS://h/x", "www.example.org", "me@example.org"]


def unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text).replace(NO_LINK, "")


@pytest.mark.parametrize(
    "text",
    [NASTY, "plain", "a\\b", "# h", "1. item", "  - x", "x_y_z", "_em_", "$x$", "", *BARE_LINKS],
)
def test_escaping_keeps_the_text_and_disarms_every_markup_character(text: str) -> None:
    escaped = md_escape(text)
    assert unescape(escaped) == text
    for ch in "[]*`<>$|~":  # these make markup anywhere: never left bare
        assert re.search(rf"(?<!\\){re.escape(ch)}", escaped) is None
    assert not re.match(r"\s*([#+-]|\d+\.)\s", escaped)  # no heading or list item
    assert not re.search(r"(?<![\\\w])_\w", escaped)  # no emphasis opened by _
    assert md_escape("fp16_zero2 2026-11-29 14:11:10.000") == "fp16_zero2 2026-11-29 14:11:10.000"
    assert not re.search(r"https?://|\bwww\.|@\w", escaped, re.IGNORECASE)  # no autolink


@pytest.mark.parametrize(
    "page",
    ["health", "steps", "training", "autotuner", "compare", "communication", "gpus", "flops"],
)
def test_a_run_name_with_markup_is_shown_as_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, page: str
) -> None:
    path = tmp_path / "s.sqlite"
    with open_store(path) as store:
        import_paths(store, [DATA / "events_crash_step17"], run=NASTY)
        if page == "compare":  # names the runs it compares in their status lines
            import_paths(store, [DATA / "events_crash_step17"], run="plain")
    monkeypatch.setenv("DSMON_STORE", str(path))
    query = {"runs": f"{NASTY},plain"} if page == "compare" else {}
    at = app_at(str(path), NASTY, page, **query)
    assert not at.exception
    heading = at.header[0].value
    if page == "compare":
        assert heading == "Compare"
        (heading,) = [
            c.value for c in at.caption if "last step" in c.value and "plain" not in c.value
        ]
    assert unescape(heading).endswith(NASTY) or unescape(heading).startswith(f"{NASTY}: ")
    assert "![x](" not in heading and "[here](" not in heading
