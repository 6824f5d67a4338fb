"""The NVML poller: one :class:`~dsmon.model.records.GpuSampleRecord` per GPU per interval.

The NVML module is passed in (``pynvml`` from nvidia-ml-py, or ``tests.fakes.FakeNvml``), so
the poller holds no import-time side effect and tests run without a GPU. NVML is initialised
once and the device handles are cached. Every field is read on its own call, as nvitop and
gpustat do: a field the GPU or driver does not offer (``NotSupported``, ``NoPermission``,
``FunctionNotFound``) is ``None`` in the record, logged once per field and GPU model, and
never hides the other fields. A GPU that falls off the bus (``GpuIsLost``) is logged once and
from then on reported with its identity only, all figures ``None``, while the others go on.
No NVML at all (no driver, no GPU) is one clear line; the collector keeps tailing logs.

Units follow NVML's documentation: power and its limit are read in mW, energy in mJ, PCIe
throughput in KB/s (taken as KiB/s, as nvitop does); the record holds W, J and bytes/s.
The GPM metrics (SM active, tensor active, DRAM bandwidth) need two samples, so they start
on a GPU's second poll, on GPUs that support GPM (Hopper and newer).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from collectors.gpu.fields import GPM_METRICS, READERS, Reader
from collectors.gpu.selection import GpuId, Selection, match
from dsmon.model.records import GpuSampleRecord, Source

logger = logging.getLogger(__name__)

#: NVML errors after which a GPU answers nothing more (fell off the bus, needs a reset).
_GPU_LOST = ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_RESET_REQUIRED")
#: Events drained per poll at most (a storm of XIDs must not stall the loop).
_MAX_EVENTS = 64


class _GpuLostError(Exception):
    """The GPU stopped answering (fell off the bus, needs a reset)."""


@dataclass(slots=True)
class _Gpu:
    index: int
    handle: Any
    uuid: str | None = None
    name: str | None = None
    lost: bool = False
    gpm: bool = False
    gpm_samples: list[Any] = field(default_factory=list)
    gpm_primed: bool = False
    xid: int | None = None


class NvmlPoller:
    """Polls the selected GPUs (every GPU NVML sees by default); see the module docstring.

    Args:
        nvml: the NVML bindings module (``pynvml``) or a fake with the same names.
        run: the run name of every sample.
        node: the node name of every sample.
        now: the local wall clock (samples carry local time with no zone, like DeepSpeed's logger).
        select: the GPUs to poll (:mod:`collectors.gpu.selection`); None for all. Samples keep
            each GPU's real NVML index and UUID, whatever selected it.
    """

    def __init__(
        self,
        nvml: Any,
        *,
        run: str,
        node: str | None = None,
        now: Callable[[], datetime] = datetime.now,
        select: Selection | None = None,
    ) -> None:
        self.nvml = nvml
        self.run = run
        self.node = node
        self.select = select
        self.available = False
        self._now = now
        self._count = 0
        self._chosen = False
        self._gpus: list[_Gpu] = []
        self._events: Any = None
        self._logged: set[tuple[str, ...]] = set()

    def start(self) -> bool:
        """Initialise NVML and open the selected GPUs; False (one warning line) without NVML.

        A selection read from a file that is not written yet leaves the poller waiting: every
        poll looks for the file again (a native sidecar starts before the trainer writes it).
        """
        try:
            self.nvml.nvmlInit()
            self._count = int(self.nvml.nvmlDeviceGetCount())
        except self.nvml.NVMLError as exc:
            logger.warning(
                "dsmon: NVML unavailable (%s): no GPU samples; log collection goes on", exc
            )
            return False
        self.available = True
        self._choose()
        return True

    def poll(self) -> list[GpuSampleRecord]:
        """One sample of every selected GPU, all with the same timestamp."""
        if not self.available:
            return []
        if not self._chosen:
            self._choose()
        ts = self._now().isoformat(timespec="milliseconds")
        self._drain_xid()
        return [self._sample(gpu, ts) for gpu in self._gpus]

    def close(self) -> None:
        """Free NVML resources and shut NVML down (errors at shutdown are ignored)."""
        if not self.available:
            return
        self.available = False
        for gpu in self._gpus:
            for sample in gpu.gpm_samples:
                self._quiet("nvmlGpmSampleFree", sample)
        if self._events is not None:
            self._quiet("nvmlEventSetFree", self._events)
        self._quiet("nvmlShutdown")

    # --- which GPUs ----------------------------------------------------------------------

    def _choose(self) -> None:
        """Open the GPUs the selection names and watch them for XID errors."""
        indices = self._selected()
        if indices is None:
            return
        for index in indices:
            gpu = self._open_gpu(index)
            if gpu is not None:
                self._gpus.append(gpu)
        self._register_xid()
        self._chosen = True
        logger.info(
            "dsmon: NVML polling %d of %d GPU(s): %s", len(self._gpus), self._count, self._models()
        )

    def _selected(self) -> list[int] | None:
        """NVML indices to poll; None while the selection's file is not written yet."""
        select = self.select
        if select is None:
            return list(range(self._count))
        items = select.current()
        if items is None:
            self._once(f"dsmon: {select.origin}: waiting for {select.file} to list the GPUs")
            return None
        known = self._identities(select.wants_migs)
        chosen, unmatched = match(items, known)
        seen = ", ".join(g.uuid or str(g.index) for g in known) or "no GPU"
        for item in unmatched:
            self._once(f"dsmon: {select.origin}: no GPU here matches {item!r}; skipped ({seen})")
        if not chosen:
            self._once(f"dsmon: {select.origin} selects no GPU of this node: no GPU samples")
        return chosen

    def _identities(self, with_migs: bool) -> list[GpuId]:
        """Index and UUID (and MIG instances' UUIDs) of every GPU, to match selectors with."""
        out = []
        for index in range(self._count):
            try:
                handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
            except self.nvml.NVMLError:
                continue  # selected or not, _open_gpu reports it
            uuid = _text(self._quiet("nvmlDeviceGetUUID", handle))
            out.append(GpuId(index, uuid, self._mig_uuids(handle) if with_migs else ()))
        return out

    def _mig_uuids(self, handle: Any) -> tuple[str, ...]:
        """UUIDs of the MIG instances on a GPU (none when MIG is off or NVML cannot say)."""
        count = self._quiet("nvmlDeviceGetMaxMigDeviceCount", handle)
        out: list[str] = []
        for i in range(int(count or 0)):
            mig = self._quiet("nvmlDeviceGetMigDeviceHandleByIndex", handle, i)
            uuid = _text(self._quiet("nvmlDeviceGetUUID", mig)) if mig is not None else None
            if uuid:
                out.append(uuid)  # empty slots (NVML_ERROR_NOT_FOUND) are skipped
        return tuple(out)

    # --- per GPU -------------------------------------------------------------------------

    def _open_gpu(self, index: int) -> _Gpu | None:
        try:
            handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
        except self.nvml.NVMLError as exc:
            logger.warning("dsmon: GPU %d: no NVML handle (%s); not polled", index, exc)
            return None
        gpu = _Gpu(index, handle)
        gpu.name = _text(self._identity(gpu, "nvmlDeviceGetName"))
        gpu.uuid = _text(self._identity(gpu, "nvmlDeviceGetUUID"))
        gpu.gpm = self._gpm_supported(gpu)
        return gpu

    def _identity(self, gpu: _Gpu, fn: str) -> Any:
        try:
            return getattr(self.nvml, fn)(gpu.handle)
        except self.nvml.NVMLError as exc:
            self._note(gpu, fn, exc)
            return None

    def _sample(self, gpu: _Gpu, ts: str) -> GpuSampleRecord:
        values: dict[str, Any] = {}
        if not gpu.lost:
            try:
                for reader in READERS:
                    values.update(self._read(gpu, reader))
                values.update(self._gpm(gpu))
            except _GpuLostError:
                values = {}
        xid, gpu.xid = gpu.xid, None
        src = Source(run=self.run, node=self.node)
        return GpuSampleRecord(
            src=src, ts=ts, gpu_index=gpu.index, uuid=gpu.uuid, name=gpu.name, xid=xid, **values
        )

    def _read(self, gpu: _Gpu, reader: Reader) -> dict[str, Any]:
        """The reader's fields, each None when the GPU does not offer them."""
        error: BaseException | None = None
        for fn, arg_names, kwarg_names in reader.calls:
            func = getattr(self.nvml, fn, None)
            args = [getattr(self.nvml, a, None) for a in arg_names]
            kwargs = {k: getattr(self.nvml, v, None) for k, v in kwarg_names}
            if func is None or None in args or None in kwargs.values():
                continue  # the bindings are older than this call: try the next one
            try:
                return dict(
                    zip(
                        reader.fields,
                        reader.convert(func(gpu.handle, *args, **kwargs)),
                        strict=True,
                    )
                )
            except self.nvml.NVMLError as exc:
                self._check_lost(gpu, exc)
                error = exc
                if not self._is(exc, "NVML_ERROR_FUNCTION_NOT_FOUND"):
                    break
        self._note(gpu, reader.fields[0], error)
        return dict.fromkeys(reader.fields)

    def _check_lost(self, gpu: _Gpu, exc: BaseException) -> None:
        if any(self._is(exc, code) for code in _GPU_LOST):
            gpu.lost = True
            logger.error(
                "dsmon: GPU %d (%s, %s) is lost (%s): reported without figures from now on",
                gpu.index, gpu.name, gpu.uuid, exc,
            )  # fmt: skip
            raise _GpuLostError from None

    # --- GPM (Hopper+) ---------------------------------------------------------------------

    def _gpm_supported(self, gpu: _Gpu) -> bool:
        query = getattr(self.nvml, "nvmlGpmQueryDeviceSupport", None)
        if query is None:
            return False
        try:
            supported = bool(query(gpu.handle).isSupportedDevice)
            if supported:
                gpu.gpm_samples = [self.nvml.nvmlGpmSampleAlloc() for _ in range(2)]
        except self.nvml.NVMLError as exc:
            self._note(gpu, "gpm", exc)
            return False
        if not supported:
            self._note(gpu, "gpm", None)
        return supported

    def _gpm(self, gpu: _Gpu) -> dict[str, Any]:
        """GPM metrics between the previous poll's sample and this one's."""
        if not gpu.gpm:
            return {}
        prev, cur = gpu.gpm_samples
        try:
            self.nvml.nvmlGpmSampleGet(gpu.handle, cur)
            values = self._gpm_metrics(prev, cur) if gpu.gpm_primed else {}
        except self.nvml.NVMLError as exc:
            self._check_lost(gpu, exc)
            self._note(gpu, "gpm", exc)
            return {}
        gpu.gpm_samples = [cur, prev]
        gpu.gpm_primed = True
        return values

    def _gpm_metrics(self, prev: Any, cur: Any) -> dict[str, Any]:
        nvml = self.nvml
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1, request.sample2 = prev, cur
        for i, (_, metric) in enumerate(GPM_METRICS):
            request.metrics[i].metricId = getattr(nvml, metric)
        nvml.nvmlGpmMetricsGet(request)
        ok = getattr(nvml, "NVML_SUCCESS", 0)
        # to a hundredth of a percent: finer than 1 s of counters tells, and what the store
        # packs three to an integer (dsmon.store.gpu.rows.pack_gpm)
        return {
            name: round(float(request.metrics[i].value), 2)
            if request.metrics[i].nvmlReturn == ok
            else None
            for i, (name, _) in enumerate(GPM_METRICS)
        }

    # --- XID events --------------------------------------------------------------------------

    def _register_xid(self) -> None:
        nvml = self.nvml
        try:
            self._events = nvml.nvmlEventSetCreate()
        except (nvml.NVMLError, AttributeError) as exc:
            logger.info("dsmon: NVML events unavailable (%s): no XID errors reported", exc)
            return
        for gpu in self._gpus:
            try:
                nvml.nvmlDeviceRegisterEvents(
                    gpu.handle, nvml.nvmlEventTypeXidCriticalError, self._events
                )
            except nvml.NVMLError as exc:
                self._note(gpu, "xid", exc)

    def _drain_xid(self) -> None:
        """Take the XID errors NVML queued since the last poll (never waiting for one)."""
        if self._events is None:
            return
        for _ in range(_MAX_EVENTS):
            wait = getattr(self.nvml, "nvmlEventSetWait_v2", None) or self.nvml.nvmlEventSetWait
            try:
                data = wait(self._events, 0)
            except self.nvml.NVMLError as exc:
                if not self._is(exc, "NVML_ERROR_TIMEOUT"):
                    self._note(None, "xid", exc)
                return
            gpu = self._by_handle(data.device)
            if gpu is not None:
                gpu.xid = int(data.eventData)
                logger.error("dsmon: GPU %d (%s): XID %d", gpu.index, gpu.uuid, gpu.xid)

    def _by_handle(self, handle: Any) -> _Gpu | None:
        key = _handle_key(handle)
        return next((g for g in self._gpus if _handle_key(g.handle) == key), None)

    # --- helpers ---------------------------------------------------------------------------

    def _is(self, exc: BaseException, code_name: str) -> bool:
        code = getattr(self.nvml, code_name, None)
        return code is not None and getattr(exc, "value", None) == code

    def _note(self, gpu: _Gpu | None, what: str, exc: BaseException | None) -> None:
        """Log a missing field once per field and GPU model (8 equal GPUs: one line)."""
        model = gpu.name if gpu is not None else None
        key = (what, str(model))
        if key in self._logged:
            return
        self._logged.add(key)
        reason = exc if exc is not None else "not supported"
        where = f"GPU {gpu.index} ({model})" if gpu is not None else "NVML"
        logger.warning("dsmon: %s: %s unavailable (%s); reported as null", where, what, reason)

    def _once(self, message: str) -> None:
        """Warn about the selection once (it is looked at again on every poll until chosen)."""
        if ("select", message) not in self._logged:
            self._logged.add(("select", message))
            logger.warning("%s", message)

    def _quiet(self, fn: str, *args: Any) -> Any:
        """Call an NVML function; None when it fails or the bindings lack it."""
        with contextlib.suppress(self.nvml.NVMLError, AttributeError):
            return getattr(self.nvml, fn)(*args)
        return None

    def _models(self) -> str:
        names = [g.name or "?" for g in self._gpus]
        return ", ".join(f"{names.count(n)}x {n}" for n in dict.fromkeys(names)) or "none"


def _text(value: Any) -> str | None:
    """NVML strings come as bytes from older bindings and str from newer ones."""
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _handle_key(handle: Any) -> Any:
    """Compare device handles by address: ctypes pointers to one device are distinct objects."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return id(handle)


def open_poller(run: str, node: str, select: Selection | None) -> NvmlPoller | None:
    """The started poller of this node's GPUs, or None (one line) with no bindings or driver.

    The bindings (``pynvml``, from nvidia-ml-py) are imported here, on use: a collector on a
    machine without them still follows its logs.
    """
    try:
        import pynvml
    except ImportError:
        logger.warning("dsmon: nvidia-ml-py is not installed: no GPU samples; logs go on")
        return None
    poller = NvmlPoller(pynvml, run=run, node=node, select=select)
    return poller if poller.start() else None
