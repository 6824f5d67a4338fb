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
#: Where bare text becomes a link (GitHub's autolinks, which Streamlit renders): before the
#: ``://`` of a URL, after the ``www`` of ``www.``, after an e-mail address's ``@``. They are
#: found in the text *after* Markdown is parsed, so an escape does not stop them; an invisible
#: WORD JOINER (U+2060) there does: the text reads the same, and is no address any more.
_AUTOLINK = re.compile(r"(?<=[A-Za-z])(?=://)|(?<=\bwww)(?=\.)|(?<=@)", re.IGNORECASE)
#: The invisible character put where a link would start (:data:`_AUTOLINK`).
NO_LINK = "\u2060"


def md_escape(text: object) -> str:
    """``text`` with every character that would make Markdown markup escaped (shown as typed).

    Escapes only what can take effect, so ordinary names and numbers read the same in the
    page's source as on screen; what would become a link of bare text gets an invisible
    :data:`NO_LINK` instead.
    """
    out = _ANYWHERE.sub(r"\\\1", str(text))
    out = _UNDERSCORE.sub(r"\\_", out)
    out = _AUTOLINK.sub(NO_LINK, out)
    return _LINE_START.sub(_block_escaped, out)


def _block_escaped(m: re.Match[str]) -> str:
    r"""``# x`` -> ``\# x``; ``1. x`` -> ``1\. x`` (a backslash before a digit would show)."""
    if m.group(2):
        return f"{m.group(1)}\\{m.group(2)}"
    return f"{m.group(1)}{m.group(3)}\\{m.group(4)}"
