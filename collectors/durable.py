"""Durable files: a directory entry made to survive a crash, for the spool and the state file.

The sender treats a spooled record as delivered and the tailer's saved position moves past
it, so both the spool's new segments and the state file's atomic rename must be on disk
before either is trusted; a file's own ``fsync`` does not cover its name in the folder.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    """Make a new or renamed directory entry durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
