"""The environment through which dsmon's processes are told which store and how to redraw.

``dsmon dashboard`` (and ``demo``, ``watch``, ``run``) start the Streamlit app as a child
process and hand it the store and the redraw period in these variables; the app, the
commands and the user all read the same names from here, so they cannot drift apart.
"""

from __future__ import annotations

import os

#: The environment variable naming the default store (a path or a store URL).
STORE_ENV = "DSMON_STORE"
#: The store used when neither ``--store`` nor ``$DSMON_STORE`` names one.
DEFAULT_STORE = "dsmon.sqlite"
#: Seconds between the dashboard's live redraws, handed to the app by ``dsmon dashboard``.
REFRESH_ENV = "DSMON_REFRESH_S"


def default_store() -> str:
    """``$DSMON_STORE`` when set, else ``./dsmon.sqlite``."""
    return os.environ.get(STORE_ENV) or DEFAULT_STORE
