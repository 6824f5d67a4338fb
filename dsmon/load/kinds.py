"""What a file holds: a DeepSpeed log, a profile, a config, dsmon's records, the probe's lines.

:func:`discover` walks a file or a run folder and :func:`classify` names each file's kind by
its name and first bytes, so that ``dsmon.load.files`` reads each with the right parser. A
DeepSpeed config is known by its name (``ds_config*.json``) or, under any other name
(``zero3.json``), by a key only a DeepSpeed config has.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from dsmon.load.records_file import looks_like_records
from dsmon.load.rotated import may_be_log, open_log, rotation
from dsmon.parse.linereader import skip_hole
from dsmon.parse.run_files import rank_of

#: Kinds of input :func:`discover` recognises.
LOG, PROFILE, CSV_MONITOR, DS_CONFIG, AUTOTUNE_SUMMARY, AUTOTUNE_EXP = (
    "log",
    "flops_profile",
    "csv_monitor",
    "ds_config",
    "autotune_summary",
    "autotune_exp",
)
#: dsmon's own JSON-lines records (``dsmon parse``/``dsmon export``), told by content.
RECORDS = "records"
#: The per-rank probe's files (``dsmon run``): ``rank-<N>.jsonl`` of JSON lines.
PROBE = "probe"
_PROBE_FILE = re.compile(r"^rank-\d+\.jsonl$")
SNIFF_BYTES = 64 * 1024
_LOG_MARKERS = (
    b"DeepSpeed",
    b"deepspeed",
    b"time (ms) |",
    b"[Rank ",
    b"] [INFO] [",
    b"] [WARNING] [",
    b"consumed samples",
    b"samples/sec",
)
#: Lines only a log has (a profile ``output_file`` beginning like a log holds none of them).
_LOGGER_MARKERS = (b"] [INFO] [", b"] [WARNING] [", b"[Rank ", b"time (ms) |")
_DS_CONFIG = re.compile(r"^(ds|deepspeed)[_-]?config.*\.json$", re.IGNORECASE)
#: Keys only a DeepSpeed config has at its top (many are named ``zero3.json``, ``ds_z2.json``).
_CONFIG_KEYS = (b'"zero_optimization"', b'"train_micro_batch_size_per_gpu"')
#: Keys of JSON files that hold such keys but are no DeepSpeed config: an autotuner experiment
#: (``"ds_config"``), the Trainer's ``trainer_state.json``, a model's ``config.json``.
_NOT_CONFIG_KEYS = (b'"ds_config"', b'"log_history"', b'"architectures"')
_PROFILE_HEADER = b"DeepSpeed Flops Profiler"
_AUTOTUNE_HEADER = b"tuning_space"
#: Keys every autotuner ``metrics.json`` has, to know one saved under another name.
_METRICS_KEYS = (b'"latency"', b'"throughput"', b'"FLOPS_per_gpu"')


class InputError(OSError):
    """A path that cannot be read; the message is ``cannot read PATH: reason``."""


@dataclass(frozen=True, slots=True)
class Found:
    """One input file and how to read it.

    ``label`` is the file name stored in each record's Source: the path relative to the
    folder that was imported, or the bare name of a file given directly, so importing the
    same run again, from anywhere, yields the same record keys.
    """

    path: Path
    kind: str
    label: str
    rank: int | None = None
    #: The rotated log this file is one of (``dsmon.load.rotated``), when its folder holds
    #: others of it: read in turn, each going on from where the one before it stopped.
    family: str | None = None


def _head(path: Path, n: int = SNIFF_BYTES) -> bytes:
    """The first ``n`` bytes of a file, after the NUL hole a copytruncate may have left."""
    with open_log(path) as f:
        head = f.read(n)
        if not head.startswith(b"\0"):
            return head
        first = skip_hole(f, head, n)[1]  # the line after the hole, then what follows it
        return first + f.read(max(n - len(first), 0))


def _config_shaped(head: bytes) -> bool:
    """A JSON object with a DeepSpeed-only key at its start, and no key of a look-alike."""
    return (
        head.lstrip().startswith(b"{")
        and any(k in head for k in _CONFIG_KEYS)
        and not any(k in head for k in _NOT_CONFIG_KEYS)
    )


def _kind(path: Path) -> str | None:
    """What a file holds, judged by its name and first bytes; None for nothing dsmon reads."""
    name = path.name
    if _PROBE_FILE.match(name):
        return PROBE if _head(path, 16).startswith(b'{"kind":') else None
    if _DS_CONFIG.match(name):
        return DS_CONFIG
    if name == "metrics.json":
        return AUTOTUNE_EXP
    head = _head(path)
    if looks_like_records(head):
        return RECORDS
    if name.endswith(".json"):
        return DS_CONFIG if _config_shaped(head) else None
    if name.endswith(".csv"):
        return CSV_MONITOR if head.startswith(b"step,") else None
    if name == "summary.txt" and head.lstrip(b"| ").startswith(_AUTOTUNE_HEADER):
        return AUTOTUNE_SUMMARY
    if _PROFILE_HEADER in head.lstrip()[:200] and not any(m in head for m in _LOGGER_MARKERS):
        return PROFILE  # an output_file holds the profile alone, no logger lines
    if head.lstrip().startswith(b"{") and all(k in head for k in _METRICS_KEYS):
        return AUTOTUNE_EXP
    if may_be_log(name) and any(m in head for m in _LOG_MARKERS):
        return LOG
    return None


def classify(path: Path, label: str, explicit: bool = False) -> Found | None:
    """How to read one file, or None when it holds nothing dsmon reads.

    A file given explicitly is read as a log unless it is recognisably something else; a
    file met while walking a folder must also look like DeepSpeed output to count as a log.
    """
    kind = _kind(path) or (LOG if explicit else None)
    if kind is None:
        return None
    return Found(path, kind, label, rank_of(path.name) if kind == LOG else None)


def _walk(root: Path) -> Iterator[Path]:
    """Files under ``root`` in name order, skipping hidden entries and caches."""
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).parts
        if any(p.startswith(".") or p == "__pycache__" for p in rel):
            continue
        if path.is_file():
            yield path


def _inputs(root: Path) -> list[Path]:
    """Files of a folder worth classifying.

    An autotuner experiment folder (one with ``metrics.json``) is read through its
    ``metrics.json`` alone: its ``ds_config.json`` is that experiment's, not the run's, and
    its ``stdout.log`` belongs to a short trial run, not to the run being imported.
    """
    paths = list(_walk(root))
    experiments = {p.parent for p in paths if p.name == "metrics.json"}
    return [p for p in paths if p.parent not in experiments or p.name == "metrics.json"]


def discover(path: Path) -> list[Found]:
    """The readable inputs a file or a run folder holds.

    Raises:
        InputError: the path does not exist or cannot be read.
    """
    try:
        if path.is_dir():
            found = (classify(p, p.relative_to(path).as_posix()) for p in _inputs(path))
            return in_read_order([f for f in found if f is not None], LOG)
        result = classify(path, path.name, explicit=True)
    except OSError as exc:
        raise InputError(f"cannot read {exc.filename or path}: {exc.strerror or exc}") from None
    return [result] if result is not None else []


def in_read_order(found: Sequence[Found], log_kind: str) -> list[Found]:
    """``found`` with the files of each rotated log oldest first, each naming its family.

    A family is a log (``Found.kind`` is ``log_kind``) and its rotated files in one folder
    (two at least). Its files take the places its members had, in age order; everything
    else keeps its place.
    """
    families: dict[str, list[int]] = {}
    for i, f in enumerate(found):
        if f.kind == log_kind:
            families.setdefault(_family(f), []).append(i)
    out = list(found)
    for family, places in families.items():
        if len(places) < 2:
            continue
        members = sorted((found[i] for i in places), key=_age)
        for i, f in zip(places, members, strict=True):
            out[i] = replace(f, family=family)
    return out


def _family(f: Found) -> str:
    """The folder and the log name a file belongs to (itself when it is no rotated name)."""
    rotated = rotation(f.path.name)
    base = rotated[0] if rotated is not None else f.path.name
    return (f.path.parent / base).as_posix()


def _age(f: Found) -> tuple[int, int, str]:
    """Oldest first: numbered rotations (highest first), dated ones, then the live file."""
    rotated = rotation(f.path.name)
    return rotated[1] if rotated is not None else (2, 0, "")
