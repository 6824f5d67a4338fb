"""Which run and which rank a log file belongs to, judged by its path alone.

``dsmon import`` of a saved run and the collector tailing a live one must name a run and
its ranks alike, or the same file would be two runs (or two ranks) depending on how it was
read. Both ask here:

- a run is named after the folder of its files (a folder given itself, the folder a file is
  in, or the fixed folder part of a glob such as ``logs/*.log``);
- DeepSpeed's ``--enable_each_rank_log`` writes one ``..._rank<N>.log`` per rank, and the
  records of such a file carry rank N when their line did not name one;
- torchrun's ``--log-dir`` writes each worker's output, from its start, to a file of its own.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from dsmon.model.records import Record

_RANK_LOG = re.compile(r"_rank(\d+)\.log$")
#: torchrun ``--log-dir``'s files: ``<log_dir>/<run_id>/attempt_<n>/<local rank>/stdout.log``.
_TORCHRUN_LOG = re.compile(r"(?:^|/)attempt_\d+/\d+/std(?:out|err)\.log$")


def rank_of(path: str) -> int | None:
    """The rank of a per-rank log (``..._rank3.log``), None for any other file."""
    m = _RANK_LOG.search(path)
    return int(m.group(1)) if m else None


def starts_with_its_worker(path: str) -> bool:
    """Whether a file holds one worker's output from its start (torchrun ``--log-dir``).

    At DeepSpeed's default log level such a file may hold nothing that says so, and the step
    clock could not number its timer lines; its path says it. (Its folder names the local
    rank, not the global one, so it gives no rank.)
    """
    return _TORCHRUN_LOG.search(path) is not None


def with_rank(records: Sequence[Record], rank: int) -> list[Record]:
    """Records of a per-rank log, each given the file's rank when its line named none."""
    return [
        r if r.src.rank is not None else replace(r, src=replace(r.src, rank=rank)) for r in records
    ]


def static_root(pattern: str) -> str:
    """The folder part of a glob before its first wildcard (``.`` when it starts with one)."""
    parts = Path(pattern).parts
    magic_at = next(i for i, p in enumerate(parts) if glob.has_magic(p))
    return str(Path(*parts[:magic_at])) if magic_at else "."


def run_name(path: str | Path) -> str:
    """The default run name of a folder, a file or a glob of files: the folder's name.

    An existing path is taken as it is, even when its name holds glob characters
    (``run[1]/``); ``run`` is the name when the folder has none (the file system's root).
    """
    path = Path(path)
    if path.is_dir():
        folder = path
    elif not path.exists() and glob.has_magic(str(path)):
        folder = Path(static_root(str(path)))
    else:
        folder = path.parent
    return folder.resolve().name or "run"
