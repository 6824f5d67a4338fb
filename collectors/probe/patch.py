"""Wrapping DeepSpeed's engine and collectives, installed when DeepSpeed's engine is imported.

:func:`install` adds an import hook (a ``sys.meta_path`` finder) that patches
``deepspeed.runtime.engine.DeepSpeedEngine`` right after that module is executed, or patches
it at once when it is already imported. Nothing else of the user's program is touched, and a
failure to patch prints one line and leaves DeepSpeed as it was: the probe must never break a
run. The per-rank file is opened as the engine is built (``DeepSpeedEngine.__init__``, inside
``deepspeed.initialize``): from then on the rank heartbeats, in phase ``init`` and then ``idle``
until the engine's first call, so a job that loads or compiles for minutes before its first
step is seen alive. Launcher processes import DeepSpeed too, but never build an engine, so
they write nothing.
"""

from __future__ import annotations

import atexit
import functools
import importlib.abc
import importlib.machinery
import os
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from . import values
from .clocks import MonotonicClock, clock_for
from .collectives import GroupSizes, facts_reader
from .engine_info import describe
from .recorder import BEFORE_TRAINING, Recorder

ENGINE_MODULE = "deepspeed.runtime.engine"
#: Environment variable naming the folder of the per-rank files; the probe is off without it.
DIR_ENV = "DSMON_PROBE_DIR"
#: Engine methods timed, with the phase each one is.
ENGINE_PHASES = {"forward": "forward", "backward": "backward", "step": "step"}
#: ``deepspeed.comm`` functions whose name the heartbeat reports while a rank is inside one.
COLLECTIVES = (
    "all_reduce",
    "all_reduce_coalesced",
    "inference_all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "allgather_fn",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_fn",
    "reduce",
    "broadcast",
    "barrier",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
)


#: The module of DeepSpeed's torch.distributed backend, whose methods make the calls.
BACKEND_MODULE = "deepspeed.comm.torch"
#: Its methods timed as the collective's own time (:func:`wrap_backend`).
BACKEND_METHODS = (
    "all_reduce",
    "inference_all_reduce",
    "all_reduce_coalesced",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_base",
    "all_gather_coalesced",
    "all_to_all_single",
    "all_to_all",
    "gather",
    "scatter",
    "barrier",
)


class _Probe:
    """The process's one recorder, made as the first engine is built (or at its first call)."""

    recorder: Recorder | None = None
    depth = 0
    comm_depth = 0
    init_depth = 0
    failed = False
    groups = GroupSizes()
    #: The backend's own times of the ``deepspeed.comm`` call in progress (:func:`wrap_backend`).
    inner: list[Any] | None = None
    #: ``deepspeed.comm``'s comms logger: only while it is on does a call do more than the
    #: backend's (so only then is the backend's time taken apart).
    comms_logger: Any = None


def _warn(what: str, exc: BaseException) -> None:
    print(f"dsmon probe: {what}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


def _rank(engine: Any) -> int:
    """The engine's global rank; while it is being built, torch.distributed's, or ``RANK``.

    ``deepspeed.initialize`` sets up torch.distributed before it builds the engine; torch is
    asked only when it is already loaded (the probe itself never imports it).
    """
    rank = getattr(engine, "global_rank", None)
    if isinstance(rank, int):
        return rank
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:  # noqa: BLE001 - a half-built process group: the launcher's RANK
        pass
    return int(os.environ.get("RANK", "0"))


def _recorder(engine: Any, phase: str = "start") -> Recorder | None:
    """The recorder, opened on first use; None when the probe is off or could not start.

    ``phase`` is the first heartbeat's: ``init`` when opened as the engine is built (its
    facts are noted once it is), ``start`` when opened at an engine's first call (a probe
    installed after the engine was built: its facts are noted now).
    """
    if _Probe.recorder is not None or _Probe.failed:
        return _Probe.recorder
    try:
        folder = os.environ[DIR_ENV]
        os.makedirs(folder, exist_ok=True)
        rank = _rank(engine)
        clock = MonotonicClock() if phase == "init" else clock_for(engine)
        path = os.path.join(folder, f"rank-{rank}.jsonl")
        rec = Recorder(path, rank, clock, phase=phase)
        rec.start()
        atexit.register(rec.close)
        _Probe.recorder = rec
    except Exception as exc:  # noqa: BLE001 - never break the run
        _Probe.failed = True
        _warn("cannot start", exc)
        return None
    if rank == 0 and phase != "init":
        _note_engine(rec, engine)
    return _Probe.recorder


def _note_engine(rec: Recorder, engine: Any) -> None:
    """Rank 0 writes the engine's config and facts once (``engine`` line); the others agree."""
    try:
        rec.note("engine", describe(engine))
    except Exception as exc:  # noqa: BLE001 - the steps matter more than the config
        _warn("cannot read the engine's config", exc)


def _progress(engine: Any) -> tuple[int | None, float | None]:
    """The engine's skipped-step counter and the optimizer's loss scale, as plain numbers.

    Both are what DeepSpeed's own ``step=N, skipped=S`` and loss-scale lines report, lines its
    workers only print at INFO. Only Python numbers are taken: a tensor (a custom loss scaler's)
    would have to wait for the device.
    """
    skipped = getattr(engine, "skipped_steps", None)
    scale = getattr(getattr(engine, "optimizer", None), "loss_scale", None)
    return (
        skipped if isinstance(skipped, int) and not isinstance(skipped, bool) else None,
        float(scale) if isinstance(scale, int | float) and not isinstance(scale, bool) else None,
    )


def _grad_norm(engine: Any, cuda: Any) -> Any:
    """A :func:`.values.take` reading of the engine's global gradient norm after a step.

    ``get_global_grad_norm()`` is what DeepSpeed's own monitors write as ``Train/Samples/
    grad_norm``: a tensor or a float, inf on a step skipped for overflow, None before the
    optimizer computed one.
    """
    try:
        get = getattr(engine, "get_global_grad_norm", None)
        value = get() if callable(get) else getattr(engine, "_global_grad_norm", None)
    except Exception:  # noqa: BLE001 - an engine that cannot say: no value
        return None
    return None if value is None else values.take(value, cuda)


def _before_call(rec: Recorder, phase: str, loss: Any) -> None:
    """What the probe reads as an engine call starts.

    Before a forward, the time outside the engine since the last call ended; at a backward,
    the loss it was given.
    """
    try:
        if phase == "forward" and rec.left_engine_ns is not None:
            rec.input_wait((time.perf_counter_ns() - rec.left_engine_ns) / 1e6)
        elif phase == "backward" and loss is not None:
            rec.loss(values.take(loss, rec.clock.cuda))
    except Exception as exc:  # noqa: BLE001 - a reading must never break the run
        _warn(f"cannot read the {phase}'s input", exc)


def wrap_engine_method(fn: Callable[..., Any], phase: str) -> Callable[..., Any]:
    """``fn`` timed as ``phase``; ``step`` also ends the optimizer step at a boundary.

    Around the call the probe also reads the time outside the engine before each forward
    (data loading and the script's host work), the loss given to ``backward``, and the
    engine's gradient norm at each optimizer step.
    """
    reads = phase in ("forward", "backward")

    @functools.wraps(fn)
    def wrapper(engine: Any, *args: Any, **kwargs: Any) -> Any:
        rec = _Probe.recorder or _recorder(engine)
        if rec is None or _Probe.depth:
            return fn(engine, *args, **kwargs)
        if rec.state[1] in BEFORE_TRAINING:  # the first call: step 1 starts here
            rec.begin(clock_for(engine))
        before = getattr(engine, "global_steps", None)
        if reads:
            _before_call(rec, phase, args[0] if args else kwargs.get("loss"))
        _Probe.depth += 1
        rec.enter(phase)
        token = rec.clock.start()
        try:
            return fn(engine, *args, **kwargs)
        finally:
            rec.timed(phase, rec.clock.stop(token))
            _Probe.depth -= 1
            after = getattr(engine, "global_steps", None)
            if phase == "step" and isinstance(after, int) and after != before:
                rec.boundary(after, *_progress(engine), _grad_norm(engine, rec.clock.cuda))
            else:
                rec.enter("outside")
            rec.left_engine_ns = time.perf_counter_ns()

    wrapper.__dsmon_probe__ = True  # type: ignore[attr-defined]
    return wrapper


def wrap_engine_init(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``DeepSpeedEngine.__init__`` opening the recorder: ``init`` while it runs, then ``idle``.

    A subclass's ``__init__`` (the pipeline engine's) calling this one counts once. An
    ``__init__`` that raises (a config DeepSpeed refuses) leaves the rank in ``init``, and
    the exception ends the process: its last heartbeat says ``failed`` and names it. Rank 0
    notes the engine's facts (version, config, backend) once it is built, before any step.
    """

    @functools.wraps(fn)
    def wrapper(engine: Any, *args: Any, **kwargs: Any) -> Any:
        rec = _recorder(engine, "init")
        if rec is None or _Probe.init_depth:
            return fn(engine, *args, **kwargs)
        _Probe.init_depth += 1
        first = rec.state[1] in BEFORE_TRAINING  # not a second engine built mid-run
        if first and rec.state[1] != "init":
            rec.enter("init")
        try:
            fn(engine, *args, **kwargs)
        finally:
            _Probe.init_depth -= 1
        if first:
            rec.enter("idle")
            if _rank(engine) == 0:
                _note_engine(rec, engine)
        return None

    wrapper.__dsmon_probe__ = True  # type: ignore[attr-defined]
    return wrapper


def wrap_collective(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``fn`` reported in the heartbeat while running, and measured (:mod:`.collectives`).

    Its host time counts in the step's ``comm_ms`` when it blocks; its time from the rank's
    clock (CUDA events on a GPU), size and group go into the step's ``collectives``. A call
    made with ``async_op=True`` is counted untimed: it returns before its work is done.
    """
    read_facts = facts_reader(name, _Probe.groups)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rec = _Probe.recorder
        if rec is None or _Probe.comm_depth:
            return fn(*args, **kwargs)
        _Probe.comm_depth += 1
        before = rec.state
        rec.enter(before[1], name)
        waits = not kwargs.get("async_op")
        try:
            nbytes, bucket, group = read_facts(args, kwargs)
        except Exception:  # noqa: BLE001 - a group torch cannot size: measured without it
            nbytes, bucket, group = None, None, None
        clock = rec.clock
        token = clock.start() if waits and clock.cuda is not None else None
        logger = _Probe.comms_logger
        _Probe.inner = [] if logger is not None and logger.enabled else None
        t0 = time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            host_ms = (time.perf_counter_ns() - t0) / 1e6
            inner, _Probe.inner = _Probe.inner, None
            if waits:
                rec.comm(host_ms)
            own = host_ms if token is None else clock.stop(token)
            pendings = (inner or [own]) if waits else []
            rec.collective((name, bucket, group, waits), nbytes, pendings)
            _Probe.comm_depth -= 1
            rec.state = (rec.state[0], *before[1:])  # back in the phase, since it began

    wrapper.__dsmon_probe__ = True  # type: ignore[attr-defined]
    return wrapper


def wrap_backend(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A method of DeepSpeed's torch.distributed backend, timed as the collective's own time.

    ``deepspeed.comm``'s functions are what the engine calls, and what the probe names and
    sizes; with the comms logger on, each call there also inspects its arguments,
    synchronises and prints its line. The backend's method is the torch.distributed call
    alone: its time, when the backend is DeepSpeed's torch one, is the time a
    ``deepspeed.comm`` call's measurement keeps while the comms logger is on (off, the two
    differ by a function call, and the backend is not timed apart).
    """

    @functools.wraps(fn)
    def wrapper(backend: Any, *args: Any, **kwargs: Any) -> Any:
        rec, inner = _Probe.recorder, _Probe.inner
        if rec is None or inner is None or _Probe.comm_depth != 1:
            return fn(backend, *args, **kwargs)
        _Probe.comm_depth += 1  # a backend method calling another is timed once
        clock = rec.clock
        token = clock.start() if clock.cuda is not None else None
        t0 = time.perf_counter_ns()
        try:
            return fn(backend, *args, **kwargs)
        finally:
            _Probe.comm_depth -= 1
            ms = (time.perf_counter_ns() - t0) / 1e6
            inner.append(ms if token is None else clock.stop(token))

    wrapper.__dsmon_probe__ = True  # type: ignore[attr-defined]
    return wrapper


def patch_backend(cls: type, names: Sequence[str] = BACKEND_METHODS) -> None:
    """Wrap the named collective methods of a backend class, where it has them."""
    for name in names:
        fn = cls.__dict__.get(name)
        if callable(fn) and not getattr(fn, "__dsmon_probe__", False):
            setattr(cls, name, wrap_backend(fn))


def patch_engine(module: ModuleType) -> None:
    """Wrap the engine class of ``deepspeed.runtime.engine`` and ``deepspeed.comm``."""
    cls = module.DeepSpeedEngine
    init = getattr(cls, "__init__", object.__init__)
    if init is not object.__init__ and not getattr(init, "__dsmon_probe__", False):
        cls.__init__ = wrap_engine_init(init)
    for method, phase in ENGINE_PHASES.items():
        fn = getattr(cls, method, None)
        if fn is not None and not getattr(fn, "__dsmon_probe__", False):
            setattr(cls, method, wrap_engine_method(fn, phase))
    for name in ("deepspeed.comm.comm", "deepspeed.comm"):
        comm = sys.modules.get(name)
        if comm is not None:
            patch_collectives(comm)
            _Probe.comms_logger = getattr(comm, "comms_logger", _Probe.comms_logger)
    backend = getattr(sys.modules.get(BACKEND_MODULE), "TorchBackend", None)
    if isinstance(backend, type):
        patch_backend(backend)


def patch_collectives(comm: ModuleType, names: Sequence[str] = COLLECTIVES) -> None:
    """Wrap the named collective functions of a module, where it has them."""
    for name in names:
        fn = getattr(comm, name, None)
        if callable(fn) and not getattr(fn, "__dsmon_probe__", False):
            setattr(comm, name, wrap_collective(fn, name))


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then patches the module it executed."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        """As the real loader does."""
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        """Execute the module, then wrap its engine."""
        self._loader.exec_module(module)
        try:
            patch_engine(module)
        except Exception as exc:  # noqa: BLE001 - never break the run
            _warn("cannot wrap DeepSpeed's engine", exc)


class EngineImportHook(importlib.abc.MetaPathFinder):
    """Finds ``deepspeed.runtime.engine`` through the other finders and patches it once loaded."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        """The engine module's spec with a patching loader; None for every other module."""
        if fullname != ENGINE_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


def install() -> bool:
    """Patch DeepSpeed's engine now or when it is imported; False when the probe is off."""
    if not os.environ.get(DIR_ENV):
        return False
    loaded = sys.modules.get(ENGINE_MODULE)
    if loaded is not None:
        patch_engine(loaded)
    elif not any(isinstance(f, EngineImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, EngineImportHook())
    return True
