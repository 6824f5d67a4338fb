"""Every collective a rank makes, measured and summed per optimizer step inside the rank.

DeepSpeed's comms logger times each collective only when it is switched on, synchronises the
device after every call to do so, and prints one line per call on rank 0. The probe measures
the collectives it already wraps (``deepspeed.comm``) on every rank, at no synchronisation:
per call, the op, the message size, the size of the process group, and the call's time from
the rank's clock (host time on the CPU accelerator; on CUDA two events on the current stream,
read once the device has passed them, as the engine's phases are). A rank never writes a line
per call (ZeRO-3 makes thousands of calls a step): the calls of one optimizer step are summed
per op, power-of-two size bucket and group size, and written with the step's ``rank_step``
line as its ``collectives`` list (docs/records.md).

A call's time is that of DeepSpeed's torch.distributed backend method it makes
(``deepspeed.comm.torch.TorchBackend``), without what ``deepspeed.comm`` itself adds around it
(with the comms logger on: inspecting the arguments, synchronising, printing its line); on
another backend, the ``deepspeed.comm`` call's time. The message size is the one nccl-tests
divides by (its PERFORMANCE.md): the buffer of an
all-reduce, reduce or broadcast; the whole gathered output of an all-gather; the whole input
of a reduce-scatter or all-to-all. A call made with ``async_op=True`` returns before its work
is done: it is counted with its bytes, and its time is unknown (``time_ms`` null).
Standard library only: it runs inside the user's ranks.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, NamedTuple


class Args(NamedTuple):
    """Where a ``deepspeed.comm`` function takes the tensor(s) that size it, and its group.

    ``name``/``pos``: the sizing argument's name and position (None: it moves no data);
    ``many``: it is a list of tensors, whose sizes add up; ``group``: the group's position.
    """

    name: str | None
    pos: int
    many: bool
    group: int


#: The sizing tensor and group of each wrapped collective, as ``deepspeed.comm`` declares them
#: (its signatures mirror torch.distributed's). Read by position or name at each call: the
#: comms logger's wrapper hides the signature from ``inspect``.
ARGS: dict[str, Args] = {
    "all_reduce": Args("tensor", 0, False, 2),
    "inference_all_reduce": Args("tensor", 0, False, 2),
    "all_reduce_coalesced": Args("tensors", 0, True, 2),
    "all_gather": Args("tensor_list", 0, True, 2),
    "all_gather_into_tensor": Args("output_tensor", 0, False, 2),
    "allgather_fn": Args("output_tensor", 0, False, 2),
    "reduce_scatter": Args("input_list", 1, True, 3),
    "reduce_scatter_tensor": Args("tensor", 1, False, 3),
    "reduce_scatter_fn": Args("tensor", 1, False, 3),
    "reduce": Args("tensor", 0, False, 3),
    "broadcast": Args("tensor", 0, False, 2),
    "barrier": Args(None, 0, False, 0),
    "all_to_all_single": Args("tensor", 1, False, 4),
    "all_to_all": Args("input_tensor_list", 1, True, 2),
    "gather": Args("tensor", 0, False, 3),
    "scatter": Args("tensor", 0, False, 3),
}


def message_bytes(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """The call's message size in bytes as nccl-tests counts it; None when it cannot tell."""
    return facts_reader(op, GroupSizes(lambda group: 1))(args, kwargs)[0]


def size_bucket(nbytes: int) -> int:
    """The power of two at or below ``nbytes`` (0 for an empty message): its bucket's floor."""
    return 1 << (nbytes.bit_length() - 1) if nbytes > 0 else 0


class GroupSizes:
    """The size of each process group a collective names, asked once per group.

    ``world_size`` is torch.distributed's ``get_world_size(group)`` (given, so tests can fake
    it); groups are long-lived, so each is kept (with its object, so its id is never reused).
    """

    def __init__(self, world_size: Callable[[Any], int] | None = None) -> None:
        self._ask = world_size
        self._sizes: dict[int, tuple[Any, int | None]] = {}

    def size(self, group: Any) -> int | None:
        """How many ranks ``group`` (None: the whole world) has; None when it cannot tell."""
        found = self._sizes.get(id(group))
        if found is not None and found[0] is group:
            return found[1]
        n = self._lookup(group)
        self._sizes[id(group)] = (group, n)
        return n

    def _lookup(self, group: Any) -> int | None:
        ask = self._ask
        if ask is None:
            dist = sys.modules.get("torch.distributed")
            if dist is None or not dist.is_available() or not dist.is_initialized():
                return None
            ask = dist.get_world_size
        try:
            n = ask(group) if group is not None else ask(None)
        except Exception:  # noqa: BLE001 - a group torch does not know: size unknown
            return None
        return int(n) if isinstance(n, int) and n > 0 else None


#: A call's message size in bytes, its size bucket (None: unknown) and its group's size.
Facts = tuple[int | None, int | None, int | None]


def facts_reader(op: str, sizes: GroupSizes) -> Callable[[tuple[Any, ...], dict[str, Any]], Facts]:
    """What a call of ``op`` moves and in which group, read from its arguments.

    Made once per wrapped function, so that a call looks nothing up by the op's name: it
    runs on the training thread at every collective.
    """
    spec = ARGS.get(op)
    if spec is None:
        return lambda args, kwargs: (None, None, None)
    name, pos, many, group_pos = spec

    def read(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Facts:
        nbytes: int | None
        try:
            if name is None:
                nbytes = 0
            else:
                value: Any = (
                    kwargs[name] if name in kwargs else args[pos] if len(args) > pos else None
                )
                if many:
                    nbytes = sum(int(t.numel()) * int(t.element_size()) for t in value)
                else:
                    nbytes = int(value.numel()) * int(value.element_size())
        except Exception:  # noqa: BLE001 - an argument of another shape: size unknown
            nbytes = None
        group = (
            kwargs["group"]
            if "group" in kwargs
            else (args[group_pos] if len(args) > group_pos else None)
        )
        bucket = None if nbytes is None else size_bucket(nbytes)
        return nbytes, bucket, sizes.size(group)

    return read


#: A step's key of summed calls: op, size bucket (None: size unknown), group size, whether
#: they were timed.
Key = tuple[str, int | None, int | None, bool]


class CollectiveTally:
    """One optimizer step's collectives, summed per :data:`Key` (the training thread adds).

    Each entry holds ``[calls, bytes, pending times]``: a time is a number on the CPU and a
    pair of CUDA events on a GPU, summed by :meth:`lines` once the device has passed them.
    """

    def __init__(self) -> None:
        self.entries: dict[Key, list[Any]] = {}

    def add(self, key: Key, nbytes: int | None, pendings: list[Any]) -> None:
        """One call of ``key``; ``pendings``: its clock's stopped measurements (none: async)."""
        entry = self.entries.get(key)
        if entry is None:
            self.entries[key] = [1, nbytes or 0, pendings]
            return
        entry[0] += 1
        entry[1] += nbytes or 0
        entry[2].extend(pendings)


def lines(
    entries: dict[Key, list[Any]], elapsed_ms: Callable[[Any], float | None], final: bool
) -> list[dict[str, Any]] | None:
    """A step's ``collectives`` list; None while the device has not passed one of its calls.

    ``elapsed_ms`` is the clock's reader; ``final`` (at exit): a time still unknown is left
    out of its sum rather than waited for.
    """
    out = []
    for (op, bucket, group, timed), (calls, nbytes, pendings) in entries.items():
        times = [elapsed_ms(p) for p in pendings]
        if any(t is None for t in times) and not final:
            return None
        known = [t for t in times if t is not None]
        out.append(
            {
                "op": op,
                "bucket_bytes": bucket,
                "group_size": group,
                "calls": calls,
                "msg_bytes": None if bucket is None else nbytes,
                "time_ms": round(sum(known), 4) if timed and known else None,
            }
        )
    return out
