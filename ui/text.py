"""Text from the run (log lines, run and rank names, messages) shown as text, never as markup.

Streamlit renders Markdown in most elements: a run name or a log line holding ``![x](http://…)``
would make every viewer's browser fetch that address, and ``[here](…)`` would become a link.
Whatever came from a log or a user is escaped before it reaches a Markdown element.
"""

from __future__ import annotations

import re

_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def md_escape(text: object) -> str:
    """``text`` with every Markdown-active character backslash-escaped (shown as typed)."""
    return _MARKDOWN.sub(r"\\\1", str(text))
