"""Streamlit as the child of a dsmon command: it ends when the command that started it does.

``dsmon dashboard`` (with its ingest server), ``watch``, ``demo`` and ``run`` start Streamlit
as a child process and stop it on SIGINT and SIGTERM (:mod:`cli.supervise`). A command
killed outright (SIGKILL, the OOM killer, a container runtime's last resort) cannot: its
Streamlit went on holding the dashboard's port, and the next start found it taken. So the
child is started through this module: on Linux it asks the kernel for SIGTERM when its
parent dies (``prctl(PR_SET_PDEATHSIG)``), and Streamlit stops on it as on any SIGTERM.
Elsewhere it runs as plain Streamlit.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

#: The supervising process's id, set by :func:`cli.ui_server.start_streamlit`.
PARENT_ENV = "DSMON_SUPERVISOR_PID"
#: ``PR_SET_PDEATHSIG`` of ``<linux/prctl.h>``.
_PR_SET_PDEATHSIG = 1


def end_with_parent(parent: int) -> bool:
    """Ask for SIGTERM when ``parent`` dies; False if it is gone already (nothing to serve).

    The kernel sends the signal when the thread that started this process ends: the
    commands start Streamlit from their main thread, which ends only with them.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    return os.getppid() == parent  # (checked after the request: no death slips between)


def main() -> None:
    """``python -m cli.ui_child run app.py --server.port ...``: Streamlit's own command line."""
    parent = os.environ.get(PARENT_ENV, "")
    if parent.isdigit() and not end_with_parent(int(parent)):
        raise SystemExit(0)
    from streamlit.web.cli import main as streamlit_main  # the full install's, as the child

    sys.argv = ["streamlit", *sys.argv[1:]]
    streamlit_main()


if __name__ == "__main__":
    main()
