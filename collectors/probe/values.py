"""Reading a training value (the loss, the gradient norm) without waiting for the device.

DeepSpeed prints neither the loss nor the gradient norm: the loss is whatever the script passes
to ``engine.backward``, and the norm is the engine's ``get_global_grad_norm()`` after a step.
Both are usually tensors. On the CPU accelerator a tensor's value is there as soon as the call
returns, and ``item()`` costs a microsecond. On CUDA ``item()`` waits for the device to finish
everything queued before it, which would stall the training loop: the value is instead copied
to pinned host memory with ``non_blocking=True`` (a copy queued behind the kernels that make
it) and an event recorded after the copy; the probe's writer thread reads the host copy once
the event says the device has passed it (``Event.query()`` never blocks). Standard library
only: torch's objects are used through the value's own methods.
"""

from __future__ import annotations

import math
from typing import Any

#: A pending value not known yet (the device has not reached it).
NOT_YET = object()


class _OnDevice:
    """A value copied off a CUDA device: the host copy and the event after the copy."""

    __slots__ = ("event", "host")

    def __init__(self, host: Any, event: Any) -> None:
        self.host, self.event = host, event


def take(value: Any, cuda: Any = None) -> Any:
    """A pending reading of ``value`` (a number, or a one-element tensor); None: no value.

    ``cuda`` is ``torch.cuda`` when the engine runs on CUDA (None on the CPU): a CUDA tensor
    is then copied without blocking. Anything else (a tensor of several elements, a value
    whose reading raises) gives None: the probe must never break the run.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        if value.numel() != 1:
            return None
        value = value.detach()
        if getattr(value.device, "type", "cpu") == "cpu":
            return float(value.item())
        if cuda is None:
            return None
        host = value.to("cpu", non_blocking=True)
        event = cuda.Event()
        event.record()
        return _OnDevice(host, event)
    except Exception:  # noqa: BLE001 - not a tensor we can read: no value
        return None


def read(pending: Any) -> Any:
    """The number a :func:`take` stands for.

    None when it has none or it is not finite; :data:`NOT_YET` while the device has not
    passed its copy.
    """
    if pending is None:
        return None
    if isinstance(pending, _OnDevice):
        try:
            if not pending.event.query():
                return NOT_YET
            pending = float(pending.host.item())
        except Exception:  # noqa: BLE001 - a copy that cannot be read: no value
            return None
    return pending if math.isfinite(pending) else None
