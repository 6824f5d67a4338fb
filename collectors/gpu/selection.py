"""Which GPUs a collector samples: ``--gpus``, ``$DSMON_GPUS``, or the job's visible devices.

A sidecar that requests no GPU sees, depending on the device plugin, every GPU of the node or
none (docs/kubernetes.md). When it sees them all it must keep to the job's, or a shared node
would mix other jobs' GPUs into this run. The selection names GPUs the way the NVIDIA
runtime and CUDA do, so the trainer's own list can be passed on unchanged:

- ``GPU-<uuid>``: a GPU by UUID (a unique prefix is enough, as for CUDA);
- ``MIG-<uuid>`` (or the old ``MIG-GPU-<uuid>/<gi>/<ci>``): the GPU holding that MIG
  instance, since NVML reports utilisation, power and clocks per physical GPU;
- ``3``: NVML index 3 (PCI bus order, as ``nvidia-smi``; CUDA numbers the same way only with
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and a container numbers only what it sees, so UUIDs are
  the safe choice across containers);
- ``@FILE``: the list read from a file, because a pod cannot hand its device IDs to another
  container through the downward API: the trainer writes ``nvidia-smi -L`` or its
  ``$NVIDIA_VISIBLE_DEVICES`` into the shared log volume. The file may appear after the
  collector starts (a native sidecar starts first), so it is looked for again on every poll.

Precedence: ``--gpus``, then ``$DSMON_GPUS``, then ``$CUDA_VISIBLE_DEVICES`` (the narrower of
the two when both are set), then ``$NVIDIA_VISIBLE_DEVICES``; a visible-devices variable only
counts when it holds a list (not ``all``, ``void``, ``none``, empty or a path). Else every GPU.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: The collector's own variable, with the same syntax as ``--gpus``.
GPUS_ENV = "DSMON_GPUS"
#: Device lists set by CUDA users, Slurm and the NVIDIA container runtime, narrowest first.
VISIBLE_ENVS = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
_ITEM = re.compile(r"\d+|(?:GPU|MIG)-[0-9A-Za-z][0-9A-Za-z/_-]*", re.IGNORECASE)
_OLD_MIG = re.compile(r"MIG-(GPU-[0-9a-f-]+)/\d+/\d+", re.IGNORECASE)
_UUID_IN_TEXT = re.compile(r"\bUUID:\s*((?:GPU|MIG)-[0-9A-Za-z/_-]+)")


class SelectionError(Exception):
    """A ``--gpus`` or ``$DSMON_GPUS`` value that names no GPU in any known way."""


@dataclass(frozen=True, slots=True)
class GpuId:
    """What NVML says identifies one GPU: its index, UUID and its MIG instances' UUIDs."""

    index: int
    uuid: str | None
    migs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Selection:
    """The GPUs to sample as the user gave them: a list, or a file that holds (will hold) one.

    Args:
        origin: where the selection came from (``--gpus``, ``$NVIDIA_VISIBLE_DEVICES``),
            for messages.
        items: the selectors, when given inline.
        file: the file to read them from, for ``@FILE``.
    """

    origin: str
    items: tuple[str, ...] = ()
    file: str | None = None

    def current(self) -> tuple[str, ...] | None:
        """The selectors now; None while the file is missing or not completely written."""
        if self.file is None:
            return self.items
        try:
            text = Path(self.file).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        # Written by a shell redirect: created empty, then filled; the last line ends it.
        return items_in(text) if text.endswith("\n") else None

    @property
    def wants_migs(self) -> bool:
        """Whether matching needs the MIG instances' UUIDs (NVML calls spared otherwise)."""
        return self.file is not None or any(i.upper().startswith("MIG-") for i in self.items)


def choose_selection(flag: str | None, environ: Mapping[str, str]) -> Selection | None:
    """The selection in force, by precedence; None for every GPU.

    Raises:
        SelectionError: ``--gpus`` or ``$DSMON_GPUS`` holds something that is not a selector.
    """
    if flag is not None:
        return parse_selection(flag, "--gpus")
    if environ.get(GPUS_ENV, "").strip():
        return parse_selection(environ[GPUS_ENV], f"${GPUS_ENV}")
    for var in VISIBLE_ENVS:
        items = split_items(environ.get(var, ""))
        if items and all(_valid(i) for i in items):
            return Selection(f"${var}", items)
    return None


def parse_selection(text: str, origin: str) -> Selection | None:
    """One ``--gpus`` value: ``all`` (None), ``@FILE``, or a comma-separated list."""
    text = text.strip()
    if text.lower() == "all":
        return None
    if text.startswith("@"):
        if not text[1:]:
            raise SelectionError(f"{origin}: '@' needs a file name")
        return Selection(origin, file=text[1:])
    items = split_items(text)
    bad = [i for i in items if not _valid(i)] or ([] if items else [text])
    if bad:
        raise SelectionError(
            f"{origin}: {bad[0]!r} is not a GPU index, a GPU-/MIG- UUID, 'all' or @FILE"
        )
    return Selection(origin, items)


def split_items(text: str) -> tuple[str, ...]:
    """Selectors separated by commas or white space."""
    return tuple(i for i in re.split(r"[,\s]+", text.strip()) if i)


def items_in(text: str) -> tuple[str, ...]:
    """Selectors in a file: the UUIDs of ``nvidia-smi -L`` output, else a plain list.

    Anything in a plain list that is not a selector is left out: the file is data written by
    another program, and the poller reports each selector that matches no GPU.
    """
    uuids = _UUID_IN_TEXT.findall(text)
    if uuids:
        return tuple(uuids)
    return tuple(i for i in split_items(text) if _valid(i))


def match(items: Sequence[str], gpus: Sequence[GpuId]) -> tuple[list[int], list[str]]:
    """The NVML indices the selectors name (ascending, once each) and the selectors that name none.

    A UUID prefix that fits several GPUs names none of them: guessing would sample the wrong
    GPU without a word.
    """
    chosen: set[int] = set()
    unmatched: list[str] = []
    for item in dict.fromkeys(items):
        index = _find(item, gpus)
        if index is None:
            unmatched.append(item)
        else:
            chosen.add(index)
    return sorted(chosen), unmatched


def _find(item: str, gpus: Sequence[GpuId]) -> int | None:
    if item.isdigit():
        return int(item) if any(g.index == int(item) for g in gpus) else None
    old = _OLD_MIG.fullmatch(item)
    key = (old.group(1) if old else item).lower()
    if key.startswith("mig-"):
        hits = [g.index for g in gpus if any(m.lower().startswith(key) for m in g.migs)]
    else:
        hits = [g.index for g in gpus if g.uuid and g.uuid.lower().startswith(key)]
    return hits[0] if len(hits) == 1 else None


def _valid(item: str) -> bool:
    return _ITEM.fullmatch(item) is not None
