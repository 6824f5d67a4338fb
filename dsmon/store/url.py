"""What a store URL names: the one place that reads ``--store`` and ``$DSMON_STORE``.

A store is a SQLite file, named by its path or ``sqlite:///PATH`` (``sqlite:////abs/path``
for an absolute one), or a PostgreSQL database, named by a libpq URL (``postgresql://`` or
``postgres://``). Commands open it (:func:`dsmon.store.store.open_store`), hand it to a child
process that runs in another folder (:func:`absolute_url`), check that a file is there before
reading it (:func:`sqlite_file`) and show it (:func:`redact_url`); none of them reads the URL
any other way. Nothing here loads a database driver.
"""

from __future__ import annotations

import re
from pathlib import Path

from dsmon.store.errors import StoreError

SQLITE_SCHEME = "sqlite:///"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres(url: str | Path) -> bool:
    """Whether the URL names a PostgreSQL database."""
    return str(url).startswith(POSTGRES_SCHEMES)


def sqlite_file(url: str | Path) -> str | None:
    """The file a SQLite store URL names; None for a PostgreSQL URL.

    ``sqlite:///rel/path`` and ``sqlite:////abs/path`` name the path after the third slash;
    anything without a scheme is a path.

    Raises:
        StoreError: ``sqlite://`` with two slashes, or a scheme dsmon has no backend for.
    """
    text = str(url)
    if is_postgres(text):
        return None
    if text.startswith(SQLITE_SCHEME):
        return text[len(SQLITE_SCHEME) :]
    if text.startswith("sqlite://"):
        raise StoreError(f"{text}: expected sqlite:///PATH (three slashes)")
    if "://" in text:
        raise StoreError(f"cannot open store {redact_url(text)}: unknown URL scheme")
    return text


def absolute_url(url: str | Path) -> str:
    """The URL with a SQLite file's path made absolute; a database URL as given.

    For a child process that runs in another folder (the dashboard runs in the checkout):
    a relative path, or ``sqlite:///rel/path``, would name another file there.
    """
    text = str(url)
    if text.startswith(SQLITE_SCHEME):
        return SQLITE_SCHEME + str(Path(text[len(SQLITE_SCHEME) :]).resolve())
    return text if "://" in text else str(Path(text).resolve())


def redact_url(url: str | Path) -> str:
    """The URL with its password replaced by ``***``, fit for messages, logs and the UI."""
    return re.sub(r"^(\w+://[^:/@]*:)[^/?#]*@", r"\1***@", str(url))
