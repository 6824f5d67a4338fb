"""The one kind of failure a command reports: a line the user can act on, and an exit status.

A command raises :class:`CommandError` for a failure the user can fix (bad input, a port in
use, a package the install left out); :func:`cli.main.main` prints it as the one line
``dsmon: <what>: <reason>`` and exits with its code, so no command prints a traceback for
bad input.
"""

from __future__ import annotations


class CommandError(Exception):
    """A failure reported as one line ``dsmon: <message>`` and exit status ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code
