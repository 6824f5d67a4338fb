"""Run scripts/train.py under DeepSpeed 0.10.0 on CPU (gloo), for the ZeRO-3 coordinator timers.

DeepSpeed 0.10.0's CPU accelerator imports intel_extension_for_pytorch and
oneccl_bindings_for_pytorch and asks for the 'ccl' backend; neither package is
installable here, so both imports are satisfied by empty modules and the backend
name is switched to gloo. Its stream API returns None, which ZeRO-3's parameter
coordinator calls methods on; on CPU every operation is synchronous, so streams are
replaced by an object whose methods do nothing,
and so are events. DeepSpeed's own code is unchanged.
"""

import contextlib
import os
import runpy
import sys
import types

import torch

for name in ("intel_extension_for_pytorch", "oneccl_bindings_for_pytorch"):
    sys.modules[name] = types.ModuleType(name)
os.environ["DS_ACCELERATOR"] = "cpu"


class NoStream:
    """A CPU 'stream': work is already done when a call returns."""

    def wait_stream(self, other):
        return None

    def synchronize(self):
        return None

    def wait_event(self, event):
        return None


class NoEvent:
    """A CPU 'event': already complete when recorded."""

    def record(self, stream=None):
        return None

    def synchronize(self):
        return None

    def query(self):
        return True

    def wait(self, stream=None):
        return None


_record_stream = torch.Tensor.record_stream


def _record_stream_cpu(self, stream):
    if stream is not None and not isinstance(stream, NoStream):
        _record_stream(self, stream)


torch.Tensor.record_stream = _record_stream_cpu

from deepspeed.accelerator import get_accelerator  # noqa: E402

acc = get_accelerator()
acc._communication_backend_name = "gloo"
type(acc).Stream = property(lambda self: NoStream)
type(acc).Event = property(lambda self: NoEvent)
acc.current_stream = lambda device_index=None: NoStream()
acc.default_stream = lambda device_index=None: NoStream()
acc.stream = lambda stream: contextlib.nullcontext()
# ZeRO-3's step() reads the caching allocator's retry count; the CPU has no caching
# allocator (0.10.0's CPU accelerator returns an int here), so there are no retries, unless
# DSMON_ALLOC_RETRIES_PER_CALL=N asks for N more at every call: then DeepSpeed's own
# "N pytorch allocator cache flushes since last step" warning is printed as on a GPU under
# memory pressure (the count is staged, the line is DeepSpeed's).
_RETRIES_PER_CALL = int(os.environ.get("DSMON_ALLOC_RETRIES_PER_CALL", "0"))
_retries = [0]


def _memory_stats(device_index=None):
    _retries[0] += _RETRIES_PER_CALL
    return {"num_alloc_retries": _retries[0]}


acc.memory_stats = _memory_stats
train = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(train, run_name="__main__")
