"""The ``dsmon`` subcommands, one module each, found by ``dsmon.cli`` at start-up.

A command module exposes ``register(subparsers)``, which adds its parser and sets
``func=run`` where ``run(args) -> int`` returns the exit code. A command reports a failure
the user can act on by raising :class:`CommandError`; ``dsmon.cli`` prints it as the one
line ``dsmon: <what>: <reason>`` and exits non-zero, so no command prints tracebacks for
bad input.
"""

from __future__ import annotations

import os

#: The environment variable naming the default store (a path or a store URL).
STORE_ENV = "DSMON_STORE"
#: The store used when neither ``--store`` nor ``$DSMON_STORE`` names one.
DEFAULT_STORE = "dsmon.sqlite"


class CommandError(Exception):
    """A failure reported as one line ``dsmon: <message>`` and exit status ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def default_store() -> str:
    """``$DSMON_STORE`` when set, else ``./dsmon.sqlite``."""
    return os.environ.get(STORE_ENV) or DEFAULT_STORE
