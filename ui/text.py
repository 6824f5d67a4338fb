"""Text from the run (log lines, run and rank names, messages) shown as text, never as markup.

Streamlit renders Markdown in most elements: a run name or a log line holding ``![x](http://…)``
would make every viewer's browser fetch that address, ``[here](…)`` would become a link, and
so would a bare ``http://…`` or ``www.…`` (GitHub's autolinks). Whatever came from a log or a
user is escaped before it reaches a Markdown element (the spinner's text is one), and only
there: an element that shows text as it is (a select box, a metric) gets it unescaped.
"""

from __future__ import annotations

import re

#: Characters that make markup wherever they are: emphasis, code, links and images (``[``),
#: raw HTML (``<``), tables, strike-through, LaTeX (Streamlit renders ``$...$``).
_ANYWHERE = re.compile(r"([\\`*\[\]<>|~$])")
#: ``_`` makes emphasis only at a word's edge (``fp16_zero2`` stays as it is).
_UNDERSCORE = re.compile(r"(?<!\w)_|_(?!\w)")
#: Block markup a line can start with: headings, lists, quotes, rules.
_LINE_START = re.compile(r"^(\s*)(?:([#+=-])|(\d+)([.)]))", re.MULTILINE)
#: What makes a link of bare text (GitHub's autolinks, which Streamlit renders): the ``:`` of
#: ``scheme://``, the ``.`` of ``www.``, an e-mail address's ``@``. Escaped, they stay text.
_AUTOLINK = re.compile(r"(?<=[A-Za-z])(:)(?=//)|(?<=\bwww)(\.)|(@)", re.IGNORECASE)


def md_escape(text: object) -> str:
    """``text`` with every character that would make Markdown markup escaped (shown as typed).

    Escapes only what can take effect, so ordinary names and numbers read the same in the
    page's source as on screen.
    """
    out = _ANYWHERE.sub(r"\\\1", str(text))
    out = _UNDERSCORE.sub(r"\\_", out)
    out = _AUTOLINK.sub(lambda m: "\\" + m.group(0), out)
    return _LINE_START.sub(_block_escaped, out)


def _block_escaped(m: re.Match[str]) -> str:
    r"""``# x`` -> ``\# x``; ``1. x`` -> ``1\. x`` (a backslash before a digit would show)."""
    if m.group(2):
        return f"{m.group(1)}\\{m.group(2)}"
    return f"{m.group(1)}{m.group(3)}\\{m.group(4)}"
