#!/usr/bin/env python3
"""What every DeepSpeed release prints for dsmon to read, rendered by the release's own code.

dsmon's parsers read DeepSpeed's output, whose wording, columns and units changed from
release to release. The oracle for the tests is DeepSpeed's print code itself: for every
release in the cache of ``scripts/deepspeed_releases.py``, this script runs the functions that
print what dsmon reads, in a sandbox, and keeps what they printed:

- the timer lines (``SynchronizedWallClockTimer.log``) for every list of timer names the
  release logs (found in its source), the ``step=`` line (``_report_progress``) and the
  ThroughputTimer line (``ThroughputTimer.stop``);
- the loss-scale messages (``DynamicLossScaler.update_scale``, the fp16 optimizers'
  ``_update_scale``) and every other loss-scale message, its format string rendered;
- the config dump (``DeepSpeedConfig.print``), ``see_memory_usage``, the comms logger's verbose
  line and summary table (``CommsLogger.append``, ``log_all``), the autotuner's summary
  (``Autotuner.print_tuning_results``), the pipeline engine's ``steps:`` and ``STAGE_PARAMS``
  lines (format strings rendered);
- the flops profiler's whole block (``get_model_profile`` and ``print_model_profile`` with an
  engine's figures), run on a tiny CPU model with the real torch.

The sandbox runs a release's module statement by statement with its imports answered by stubs
(anything but the standard library, numpy, tabulate, the release's own logging and config
helpers, and torch for the flops profiler), so no release needs to be installed or built: a
release whose code cannot run with the stubs is listed under ``missing`` with the reason.
Numbers the code reads from the hardware (memory, rank, time) are fixed, so the output is
the same on every machine. The logger's header is DeepSpeed's own formatter with a fixed time.

Output: one JSON file per kind under ``tests/oracle/deepspeed/`` (committed; the sources never
are). Each holds the forms the releases print, a form being the lines one release printed and
the list of releases that print the same (up to the logger header's line number), with the
inputs the code was given (``expect``), which the tests compare dsmon's records with.

Usage (the interpreter needs torch, numpy, psutil and tabulate; DeepSpeed itself is not used)::

    python scripts/deepspeed_formats.py                     # every cached release
    python scripts/deepspeed_formats.py --versions 0.3.16 0.19.8 --out /tmp/oracle
"""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import copy
import importlib
import io
import json
import logging
import math
import os
import re
import subprocess
import sys
import tempfile
import traceback
import types
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deepspeed_releases import cache_dir, version_key  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "oracle" / "deepspeed"
GiB = 1024**3
#: The fixed moment every logger line is stamped with, and the clock the code reads.
STAMP = "2024-05-06 07:08:09,123"
NOW = 1_700_000_000.0

# ------------------------------------------------------------------------------------------
# The sandbox: stubs for everything a release imports, its output captured.

#: What calls on a stub return, by the called attribute's name (rank 0 of 2, fixed memory).
CALLS: dict[str, Any] = {
    "get_rank": 0,
    "get_world_size": 2,
    "get_local_rank": 0,
    "is_initialized": True,
    "is_available": True,
    "memory_allocated": 3.71 * GiB,
    "max_memory_allocated": 39.0 * GiB,
    "memory_reserved": 5.5 * GiB,
    "memory_cached": 5.5 * GiB,
    "max_memory_reserved": 6.25 * GiB,
    "max_memory_cached": 6.25 * GiB,
    "torch_memory_reserved": 5.5 * GiB,
    "torch_max_memory_reserved": 6.25 * GiB,
    "device_count": 1,
    # Megatron's parallel ranks (its memory report prints on data-parallel rank 0)
    "get_data_parallel_rank": 0,
    "get_tensor_model_parallel_rank": 0,
    "get_pipeline_model_parallel_rank": 0,
}
#: What attributes of a stub are, by name (psutil's virtual_memory figures).
ATTRS: dict[str, Any] = {
    "total": 64.0 * GiB,
    "available": 51.5 * GiB,
    "used": 12.5 * GiB,
    "percent": 19.5,
}
#: Modules imported for real; every other import is a stub.
REAL = {
    "abc", "argparse", "ast", "base64", "bisect", "collections", "contextlib", "copy", "csv",
    "dataclasses", "datetime", "decimal", "enum", "fnmatch", "functools", "gc", "glob",
    "hashlib", "heapq", "importlib", "inspect", "io", "itertools", "json", "logging", "math",
    "numbers", "operator", "os", "pathlib", "pickle", "pprint", "random", "re", "shutil",
    "signal", "socket", "statistics", "string", "struct", "subprocess", "sys", "tempfile",
    "textwrap", "threading", "traceback", "types", "typing", "typing_extensions", "uuid",
    "warnings", "weakref", "numpy", "tabulate",
}  # fmt: skip
#: Release modules loaded for real (sandboxed): the logger, the config's JSON encoder, timers.
OWN = {"deepspeed.utils.logging", "deepspeed.runtime.config_utils", "deepspeed.utils.timer"}
#: Names other modules import from the logging module through a package (``deepspeed.utils``).
LOGGING_NAMES = {
    "logger", "log_dist", "print_dist", "print_json_dist", "print_configuration",
    "warning_once", "log_dist_once", "get_dist_msg", "should_log_le",
}  # fmt: skip


class Stub:
    """Anything a release imports that the sandbox does not give for real.

    Every attribute, call and item of a stub is a stub (named by the path to it), except the
    hardware figures of :data:`CALLS` and :data:`ATTRS`. Used as a decorator it returns the
    function it decorates; used as a base class it is ``object``.
    """

    def __init__(self, name: str = "stub") -> None:
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        if attr in CALLS:
            value = CALLS[attr]
            return lambda *a, **k: value
        if attr in ATTRS:
            return ATTRS[attr]
        return Stub(f"{self._name}.{attr}")

    def __setattr__(self, attr: str, value: Any) -> None:
        object.__setattr__(self, attr, value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """A stub; the function itself when used as a decorator."""
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], Stub):
            return args[0]  # a decorator
        return Stub(f"{self._name}()")

    def __getitem__(self, key: Any) -> Stub:
        return Stub(f"{self._name}[]")

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stub) and other._name == self._name

    def __hash__(self) -> int:
        return hash(self._name)

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)

    def __enter__(self) -> Stub:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __repr__(self) -> str:
        return self._name


class _Anything:
    """Base of the classes a release imports from modules the sandbox stubs.

    Built with any arguments; an instance of nothing else, so ``isinstance`` can ask of it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


class Fake:
    """A stand-in ``self``: the attributes a function reads, a stub for any other."""

    def __init__(self, **attrs: Any) -> None:
        self.__dict__.update(attrs)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Stub(f"self.{attr}")


class Sandbox:
    """One release's modules, loaded statement by statement with stubbed imports.

    Args:
        root: the folder holding the release's ``deepspeed/``.
        real_torch: import torch for real (the flops profiler needs it), else stub it.
    """

    def __init__(self, root: Path, real_torch: bool = False) -> None:
        self.root = root
        self.real_torch = real_torch
        #: The clock the release reads: still, or ticking 1 ms a reading where the code
        #: measures durations itself (the flops profiler).
        self.time = _FakeTime(0.001) if real_torch else _FAKE_TIME
        self.printed: list[str] = []
        self._modules: dict[str, types.ModuleType] = {}
        self._builtins = dict(vars(builtins))
        self._builtins["print"] = self._print
        self._builtins["__import__"] = self._import
        self._constants: dict[str, Any] | None = None
        #: Every file of the release, parsed once (:func:`py_files`).
        self.parsed: list[tuple[str, ast.Module, str]] | None = None

    # -- output --------------------------------------------------------------------------

    def _print(self, *args: Any, sep: str = " ", end: str = "\n", **_: Any) -> None:
        self.printed.append(sep.join(str(a) for a in args) + end)

    def take(self) -> list[str]:
        """The lines printed (and logged) since the last take."""
        text, self.printed = "".join(self.printed), []
        return text.splitlines()

    # -- modules -------------------------------------------------------------------------

    def _import(
        self,
        name: str,
        globals: dict[str, Any] | None = None,
        locals: Any = None,
        fromlist: Any = (),
        level: int = 0,
    ) -> Any:
        if level:
            package = (globals or {}).get("__package__") or ""
            base = package.rsplit(".", level - 1)[0] if level > 1 else package
            name = f"{base}.{name}" if name else base
        top = name.split(".")[0]
        if top == "time":
            return self.time
        if name == "collections" and not fromlist:
            return _COLLECTIONS  # with the ABCs of Python < 3.10 (``collections.Mapping``)
        if top in REAL or (self.real_torch and top == "torch"):
            module = importlib.import_module(name)
            return module if fromlist else importlib.import_module(top)
        if name in OWN or (fromlist and any(f"{name}.{f}" in OWN for f in fromlist)):
            return self._own(name, fromlist)
        if top == "deepspeed" and fromlist and any(f in LOGGING_NAMES for f in fromlist):
            package = Stub(name)  # ``from deepspeed.utils import logger, log_dist``
            logging_module = self.logging_module()
            for member_name in fromlist:
                if member_name in LOGGING_NAMES and hasattr(logging_module, member_name):
                    setattr(package, member_name, getattr(logging_module, member_name))
            return package
        if fromlist:
            package = Stub(name)
            for member_name in fromlist:  # a class: something ``isinstance`` can be asked of
                if member_name[:1].isupper() and not member_name.isupper():
                    setattr(package, member_name, type(member_name, (_Anything,), {}))
            return package
        return Stub(top)

    def _own(self, name: str, fromlist: Any) -> Any:
        """A release module of :data:`OWN`, or a stub package whose listed members are."""
        if name in OWN:
            return self.load(name)
        package = Stub(name)
        for member in fromlist:
            if f"{name}.{member}" in OWN:
                setattr(package, member, self.load(f"{name}.{member}"))
        return package

    def load(self, name: str) -> types.ModuleType:
        """A release module, each top-level statement run on its own (failures are skipped)."""
        if name in self._modules:
            return self._modules[name]
        path = self.root / (name.replace(".", "/") + ".py")
        if not path.exists():
            path = self.root / name.replace(".", "/") / "__init__.py"
        if not path.exists():
            raise KeyError(f"this release has no {name}")
        module = types.ModuleType(name)
        module.__dict__.update(
            __builtins__=self._builtins,
            __file__=str(path),
            __package__=name if path.name == "__init__.py" else name.rpartition(".")[0],
        )
        self._modules[name] = module
        source = path.read_text(encoding="utf-8", errors="replace")
        for node in ast.parse(source).body:
            code = compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec")
            with contextlib.suppress(Exception):
                exec(code, module.__dict__)
        if name == "deepspeed.utils.logging":
            self._capture_logger(module)
        return module

    def _capture_logger(self, module: types.ModuleType) -> None:
        """The release's logger, its own formatter writing here, every level shown."""
        logger = getattr(module, "logger", None)
        if not isinstance(logger, logging.Logger):
            return
        formatter = next((h.formatter for h in logger.handlers if h.formatter), None)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        sandbox = self

        class _Capture(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                sandbox.printed.append(self.format(record) + "\n")

        handler = _Capture()
        fixed = formatter or logging.Formatter("%(message)s")
        fixed.formatTime = lambda record, datefmt=None: STAMP  # type: ignore[method-assign]
        handler.setFormatter(fixed)
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)  # what "log_level": "info" (or lower) shows

    def constants(self) -> dict[str, Any]:
        """The release's module-level constants (:func:`constants`), read once."""
        if self._constants is None:
            self._constants = constants(self)
        return self._constants

    def logging_module(self) -> types.ModuleType:
        """The release's ``deepspeed/utils/logging.py``."""
        return self.load("deepspeed.utils.logging")


class _FakeTime(types.ModuleType):
    """``time`` for the sandbox: a clock that reads :data:`NOW`, or ticks at each reading.

    A ticking clock (``tick`` seconds a reading) gives durations that are the same on every
    machine, and never 0.
    """

    def __init__(self, tick: float = 0.0) -> None:
        super().__init__("time")
        self._tick = tick
        self._now = NOW

    def time(self) -> float:
        self._now += self._tick
        return self._now

    def perf_counter(self) -> float:
        return self.time()

    def sleep(self, _: float) -> None:
        return None

    def __getattr__(self, attr: str) -> Any:
        import time as real

        return getattr(real, attr)


_FAKE_TIME = _FakeTime()
#: ``collections`` as releases written for Python < 3.10 see it (``collections.Mapping``).
_COLLECTIONS = types.ModuleType("collections")
_COLLECTIONS.__dict__.update(vars(importlib.import_module("collections")))
for _abc in ("Mapping", "MutableMapping", "Sequence", "Iterable", "Callable", "Set"):
    setattr(_COLLECTIONS, _abc, getattr(importlib.import_module("collections.abc"), _abc))


def member(module: types.ModuleType, dotted: str) -> Callable[..., Any]:
    """``Class.method`` or ``function`` of a loaded module; KeyError when the release lacks it."""
    obj: Any = module
    for part in dotted.split("."):
        found = getattr(obj, part, None) if not isinstance(obj, dict) else obj.get(part)
        if found is None or isinstance(found, Stub):
            raise KeyError(f"{module.__name__} has no {dotted}")
        obj = found
    return obj  # type: ignore[no-any-return]


def source_of(sb: Sandbox, module: str) -> str:
    """The text of a release module ('' when the release has none)."""
    path = sb.root / (module.replace(".", "/") + ".py")
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


# ------------------------------------------------------------------------------------------
# Reading a release's source: constants and the timer-name lists it logs.


def py_files(sb: Sandbox) -> list[tuple[str, ast.Module, str]]:
    """(path under the release, parsed module, text) of every Python file of the release."""
    if sb.parsed is None:
        sb.parsed = []
        for path in sorted((sb.root / "deepspeed").rglob("*.py")):
            text = path.read_text(encoding="utf-8", errors="replace")
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            sb.parsed.append((path.relative_to(sb.root).as_posix(), tree, text))
    return sb.parsed


def constants(sb: Sandbox) -> dict[str, Any]:
    """Module-level ``NAME = <literal>`` of the whole release (the first file to bind a name).

    Lists of such names are included (``OPTIMIZER_TIMERS = [OPTIMIZER_ALLGATHER_TIMER, ...]``).
    """
    found: dict[str, Any] = {}
    lists: list[tuple[str, ast.expr]] = []
    for _, tree, _ in py_files(sb):
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name) and target.id not in found:
                    try:
                        found[target.id] = ast.literal_eval(node.value)
                    except (ValueError, TypeError, SyntaxError, MemoryError):
                        if isinstance(node.value, ast.List | ast.Tuple | ast.BinOp):
                            lists.append((target.id, node.value))
    for _ in range(3):  # lists of lists: ``STEP_TIMERS = OVERFLOW_TIMERS + [...]``
        for name, value in lists:
            names = _names_of(value, found, [])
            if names is not None and name not in found:
                found[name] = names
    return found


def _names_of(
    node: ast.AST, consts: dict[str, Any], scope: list[ast.stmt], depth: int = 0
) -> list[str] | None:
    """The timer names an expression stands for, when the source says them statically."""
    if depth > 4:
        return None
    if isinstance(node, ast.List | ast.Tuple):
        out: list[str] = []
        for elt in node.elts:
            if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                out.append(elt.value)
            elif isinstance(elt, ast.Name) and isinstance(consts.get(elt.id), str):
                out.append(consts[elt.id])
            elif isinstance(elt, ast.Name) and isinstance(_local(elt.id, scope), str):
                out.append(_local(elt.id, scope))
            else:
                return None
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = _names_of(node.left, consts, scope, depth + 1)
        right = _names_of(node.right, consts, scope, depth + 1)
        return None if left is None or right is None else left + right
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("list", "tuple", "sorted")
        and len(node.args) == 1
    ):
        return _names_of(node.args[0], consts, scope, depth + 1)
    if isinstance(node, ast.Name):
        value = consts.get(node.id)
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            return list(value)
        return _built_in(node.id, consts, scope, depth + 1)
    return None


def _local(name: str, scope: list[ast.stmt]) -> Any:
    """A string a function binds to a local name (``SWAP_INIT_TIMER = "swap_init_write"``)."""
    for stmt in scope:
        for sub in ast.walk(stmt):
            if (
                isinstance(sub, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == name for t in sub.targets)
                and isinstance(sub.value, ast.Constant)
            ):
                return sub.value.value
    return None


def _built_in(
    name: str, consts: dict[str, Any], scope: list[ast.stmt], depth: int
) -> list[str] | None:
    """A list (or set) of names a function builds: ``x = [...]``, ``x.append(N)``, ``x += [...]``."""
    out: list[str] = []
    seen = False
    for stmt in scope:
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in sub.targets
            ):
                names = _names_of(sub.value, consts, scope, depth)
                empty = isinstance(sub.value, ast.Call) and not sub.value.args
                if names is None and not empty:
                    return None
                out.extend(names or [])
                seen = True
            elif (
                isinstance(sub, ast.AugAssign)
                and isinstance(sub.target, ast.Name)
                and sub.target.id == name
            ):
                names = _names_of(sub.value, consts, scope, depth)
                if names is None:
                    return None
                out.extend(names)
            elif (
                isinstance(sub, ast.Call)
                and isinstance(sub.func, ast.Attribute)
                and isinstance(sub.func.value, ast.Name)
                and sub.func.value.id == name
                and sub.func.attr in ("append", "add")
                and len(sub.args) == 1
            ):
                names = _names_of(ast.List(elts=[sub.args[0]]), consts, scope, depth)
                if names is None:
                    return None
                out.extend(names)
    return out if seen and out else None


def _engine_lists(tree: ast.Module, consts: dict[str, Any]) -> dict[str, list[str]]:
    """``self.X`` lists of a timer-holding class (``EngineTimers``): every name added to them."""
    lists: dict[str, list[str]] = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for sub in ast.walk(cls):
            if isinstance(sub, ast.AugAssign | ast.Assign):
                targets = [sub.target] if isinstance(sub, ast.AugAssign) else sub.targets
                for t in targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                        names = _names_of(sub.value, consts, [])
                        if names:
                            lists.setdefault(t.attr, []).extend(names)
    return lists


_LOG_CALLS = frozenset({"log", "_log_timers", "log_timers"})


def timer_lists(sb: Sandbox) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """Every list of timer names the release logs, with where; and the calls it could not read."""
    consts = constants(sb)
    found: list[tuple[str, list[str]]] = []
    unread: list[str] = []
    for rel, tree, text in py_files(sb):
        if ".log(" not in text:
            continue
        engine_lists = _engine_lists(tree, consts)
        for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            for call in (n for n in ast.walk(func) if isinstance(n, ast.Call)):
                f = call.func
                if not isinstance(f, ast.Attribute) or f.attr not in _LOG_CALLS:
                    continue
                owner = ast.unparse(f.value)
                helper = f.attr in ("_log_timers", "log_timers") and call.args
                if not helper and not (f.attr == "log" and owner.endswith("timers")):
                    continue
                if helper and not isinstance(call.args[0], ast.List | ast.Name):
                    continue  # the helper passes on its argument: read at its callers
                arg = (
                    call.args[0]
                    if call.args
                    else next((k.value for k in call.keywords if k.arg == "names"), None)
                )
                if arg is None:
                    continue
                params = {a.arg for a in func.args.args}
                inner = arg.args[0] if isinstance(arg, ast.Call) and arg.args else arg
                if isinstance(inner, ast.Name) and inner.id in params:
                    continue  # a helper's parameter: the names are read at its callers
                names = _names_of(arg, consts, func.body)
                if names is None and isinstance(arg, ast.Attribute):
                    names = engine_lists.get(arg.attr)
                where = f"{rel}:{func.name}"
                if names:
                    if (where, names) not in found:
                        found.append((where, names))
                else:
                    unread.append(f"{where}: {ast.unparse(arg)}")
    return found, unread


# ------------------------------------------------------------------------------------------
# The jobs: each runs one piece of a release's print code and returns the forms it printed.

Form = dict[str, Any]


def form(source: str, lines: list[str], expect: dict[str, Any], case: str = "") -> Form:
    """One printed form: where it comes from, what it printed, what the code was given."""
    return {"source": source, "case": case, "lines": lines, "expect": expect}


def job_timers(sb: Sandbox) -> list[Form]:
    """``SynchronizedWallClockTimer.log`` on every list of timer names the release logs."""
    timer = sb.load("deepspeed.utils.timer")
    log = member(timer, "SynchronizedWallClockTimer.log")
    body = ast.get_source_segment(source_of(sb, "deepspeed.utils.timer"), _def_of(log)) or ""
    per_ms = 1000.0 if "1000" in body else 1.0  # before 0.6.3 a timer's elapsed() was seconds
    groups, _ = timer_lists(sb)
    out = []
    for where, names in groups:
        values = [round(11.25 + 7.5 * i, 2) for i in range(len(names))]
        timers = {
            n: Fake(elapsed=lambda reset=True, v=v: v / per_ms)
            for n, v in zip(names, values, strict=True)
        }
        log(Fake(timers=timers), names)
        out.append(form(where, sb.take(), {"names": names, "values_ms": values}))
    return out


def _def_of(func: Callable[..., Any]) -> ast.AST:
    """The ``def`` node of a function loaded by the sandbox (for its source text)."""
    code = func.__code__
    tree = ast.parse(Path(code.co_filename).read_text(encoding="utf-8", errors="replace"))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.FunctionDef)
            and node.name == code.co_name
            and node.lineno <= code.co_firstlineno <= (node.end_lineno or node.lineno)
        ):
            return node
    raise KeyError(code.co_name)


def job_step(sb: Sandbox) -> list[Form]:
    """``DeepSpeedEngine._report_progress``: the ``step=`` line, for Adam's and SGD's momentum."""
    engine = _function(sb, "deepspeed.runtime.engine", "DeepSpeedEngine._report_progress")
    out = []
    for case, lr, mom in (
        ("adam", [0.0001, 5e-05], [(0.9, 0.999), (0.9, 0.999)]),
        ("sgd", [0.1], [0.9]),
    ):
        me = Fake(get_lr=lambda lr=lr: lr, get_mom=lambda mom=mom: mom, skipped_steps=3)
        engine(me, 120)
        expect = {"step": 120, "skipped": 3, "lr": lr, "mom": mom}
        out.append(form("deepspeed/runtime/engine.py:_report_progress", sb.take(), expect, case))
    return out


def _function(sb: Sandbox, module: str, dotted: str) -> Callable[..., Any]:
    """One function of a release module, compiled alone with the module's imports and constants.

    For modules too big or too entangled to load whole (the engine): the function's own
    statement runs in a namespace holding the module's imports and constant bindings.
    """
    text = source_of(sb, module)
    if not text:
        raise KeyError(f"no {module}")
    tree = ast.parse(text)
    holder: list[ast.stmt] = tree.body
    *owners, name = dotted.split(".")
    for owner in owners:
        holder = next(
            (n.body for n in holder if isinstance(n, ast.ClassDef) and n.name == owner), []
        )
    node = next((n for n in holder if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if node is None:
        raise KeyError(f"{module} has no {dotted}")
    path = sb.root / (module.replace(".", "/") + ".py")
    namespace: dict[str, Any] = dict(sb.constants())  # ``from .constants import *``
    namespace.update(os=os, sys=sys, json=json, math=math, copy=copy, time=sb.time)
    namespace.update(
        __builtins__=sb._builtins, __package__=module.rpartition(".")[0], __name__=module
    )
    for stmt in tree.body:
        if isinstance(stmt, ast.Import | ast.ImportFrom | ast.Assign | ast.Try | ast.If):
            code = compile(ast.Module(body=[stmt], type_ignores=[]), str(path), "exec")
            with contextlib.suppress(Exception):
                exec(code, namespace)
    for stmt in tree.body:  # the module's own helpers (see_memory_usage's torch_memory_reserved)
        if isinstance(stmt, ast.FunctionDef) and stmt is not node:
            stmt.decorator_list = []
            code = compile(ast.Module(body=[stmt], type_ignores=[]), str(path), "exec")
            exec(code, namespace)
    node.decorator_list = []
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]  # type: ignore[no-any-return]


def job_throughput(sb: Sandbox) -> list[Form]:
    """``ThroughputTimer.stop`` at a report boundary: 32 samples in 0.5 s, epoch 2."""
    timer = sb.load("deepspeed.utils.timer")
    stop = member(timer, "ThroughputTimer.stop")
    params = stop.__code__.co_varnames[: stop.__code__.co_argcount]
    logger = sb.logging_module().logger
    me = Fake(
        started=True, start_time=NOW - 0.5, end_time=0.0, total_elapsed_time=10.0,
        step_elapsed_time=0.0, batch_size=32, num_workers=1, epoch_count=2,
        micro_step_count=6, global_step_count=4, total_step_count=6, local_step_count=6,
        start_step=2, steps_per_output=1, monitor_memory=False, logging=logger.info,
        config=Fake(enabled=True, synchronized=True), _is_report_boundary=lambda: True,
        avg_samples_per_sec=lambda: 60.5, initialized=True,
    )  # fmt: skip
    if "global_step" in params:
        stop(me, global_step=True)
    else:
        stop(me)
    expect = {
        "epoch": 2, "micro_step": 7, "global_step": 5 if "global_step" in params else None,
        "running_avg_samples_per_s": 60.5, "samples_per_s": 64.0, "mem_allocated_gb": 3.71,
        "max_mem_allocated_gb": 39.0,
    }  # fmt: skip
    return [form("deepspeed/utils/timer.py:ThroughputTimer.stop", sb.take(), expect)]


def _header(sb: Sandbox, level: str, path: Path, line: int, func: str) -> str:
    """DeepSpeed's logger header for a message logged at ``path:line`` in ``func``."""
    return f"[{STAMP}] [{level}] [{path.name}:{line}:{func}] "


def job_memory(sb: Sandbox) -> list[Form]:
    """``see_memory_usage`` (``memory_breakdown``): the label, the MA line and the CPU line."""
    see = _function(sb, "deepspeed.runtime.utils", "see_memory_usage")
    if "force" in see.__code__.co_varnames[: see.__code__.co_argcount]:
        see("Engine before forward", force=True)
    else:
        see("Engine before forward")
    expect = {
        "label": "Engine before forward", "ma_gb": 3.71, "max_ma_gb": 39.0, "ca_gb": 5.5,
        "max_ca_gb": 6.25, "cpu_used_gb": 12.5, "cpu_percent": 19.5,
    }  # fmt: skip
    return [form("deepspeed/runtime/utils.py:see_memory_usage", sb.take(), expect)]


def job_loss_scaler(sb: Sandbox) -> list[Form]:
    """The loss scalers: ``DynamicLossScaler.update_scale`` and the fp16 ``_update_scale``.

    An overflow that halves the scale, one that spends a hysteresis, the scale at its minimum;
    and for the fp16 optimizers an overflow, a window without one, a static scale.
    """
    out: list[Form] = []
    update = _function(sb, "deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler.update_scale")
    base = dict(
        cur_scale=65536.0, scale_factor=2.0, min_scale=1.0, delayed_shift=2, cur_hysteresis=1,
        consecutive_hysteresis=False, cur_iter=120, last_overflow_iter=100, scale_window=1000,
        raise_error_at_min_scale=True, dtype=Stub("torch.half"), dynamic=True,
    )  # fmt: skip
    for case, changes in (
        ("overflow", {}),
        ("hysteresis", {"cur_hysteresis": 2}),
        ("minimum", {"cur_scale": 1.0}),
    ):
        me = Fake(**(base | changes))
        error = ""
        try:
            update(me, True)
        except Exception as exc:  # noqa: BLE001 - DeepSpeed raises at the minimum scale
            error = str(exc)
        lines = sb.take() + ([error] if error else [])
        expect = {"attempted_scale": me.__dict__["cur_scale"] if case != "minimum" else 1.0}
        expect |= {"hysteresis": changes.get("cur_hysteresis", 1)}
        out.append(form("deepspeed/runtime/fp16/loss_scaler.py:update_scale", lines, expect, case))
    for module in ("fused_optimizer", "unfused_optimizer"):
        with contextlib.suppress(KeyError):
            fn = _function(sb, f"deepspeed.runtime.fp16.{module}", "FP16_Optimizer._update_scale")
            for case, skip, dynamic in (
                ("overflow", True, True), ("window", False, True), ("static", True, False)
            ):  # fmt: skip
                state = dict(
                    dynamic_loss_scale=dynamic, cur_scale=65536.0, scale_factor=2.0,
                    min_loss_scale=1.0, cur_iter=120, last_overflow_iter=119 - 1000,
                    scale_window=1000, verbose=True, delayed_shift=1, cur_hysteresis=1,
                    consecutive_hysteresis=False,
                )  # fmt: skip
                me = Fake(**state, loss_scale_config=Fake(**state))  # 0.18+ keeps it apart
                fn(me, skip)
                expect = {"iteration": 120, "scale": 65536.0}
                src = f"deepspeed/runtime/fp16/{module}.py:_update_scale"
                out.append(form(src, sb.take(), expect, case))
    return out


def job_config(sb: Sandbox) -> list[Form]:
    """``DeepSpeedConfig.print``: the dump the engine logs at start-up, user JSON included."""
    printer = _function(sb, "deepspeed.runtime.config", "DeepSpeedConfig.print")
    user = {
        "train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "steps_per_print": 10,
        "fp16": {"enabled": True, "initial_scale_power": 16},
        "zero_optimization": {"stage": 2, "reduce_bucket_size": 500000000.0},
        "wall_clock_breakdown": True,
    }  # fmt: skip
    attrs = {
        "train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 4, "steps_per_print": 10, "fp16_enabled": True,
        "zero_enabled": True, "zero_optimization_stage": 2, "gradient_clipping": 1.0,
        "wall_clock_breakdown": True, "sparse_gradients_enabled": False,
        "optimizer_name": "adamw", "optimizer_params": {"lr": 0.0001, "weight_decay": 0.01},
        "a_long_attribute_name_over_29_chars": 7, "_param_dict": user,
    }  # fmt: skip
    methods: dict[str, Any] = {}
    with contextlib.suppress(KeyError):  # a method, so not one of the attributes printed
        puc = _function(sb, "deepspeed.runtime.config", "DeepSpeedConfig.print_user_config")
        methods["print_user_config"] = lambda self: puc(self)
    me = type("DeepSpeedConfig", (Fake,), methods)(**attrs)
    printer(me, _dump_name(sb))
    expect = {"attributes": {k: v for k, v in attrs.items() if k != "_param_dict"}, "json": user}
    return [form("deepspeed/runtime/config.py:DeepSpeedConfig.print", sb.take(), expect)]


def _dump_name(sb: Sandbox) -> str:
    """The name the engine gives its config dump (``DeepSpeedLight configuration`` in 2020)."""
    text = source_of(sb, "deepspeed.runtime.engine")
    m = re.search(r"_config\.print\(\s*['\"]([^'\"]+)['\"]", text)
    return m.group(1) if m else "DeepSpeedEngine configuration"


#: The collectives the comms logger job records: (op, message bytes, latencies in ms).
COMM_CALLS = (
    ("all_reduce", 4 * 1024 * 1024, (12.5, 13.5)),
    ("all_gather", 1536, (0.75,)),
    ("broadcast", 3 * 1024**3, (250.0,)),
)


def job_comms(sb: Sandbox) -> list[Form]:
    """``CommsLogger.append`` (verbose lines) for a few collectives, then ``log_all`` (table)."""
    module = sb.load("deepspeed.utils.comms_logging")
    append, log_all = member(module, "CommsLogger.append"), member(module, "CommsLogger.log_all")
    me = Fake(comms_dict={}, verbose=True, debug=False, prof_ops=[], prof_all=True, enabled=True)
    verbose: list[str] = []
    calls = []
    for op, size, latencies in COMM_CALLS:
        for latency in latencies:
            append(me, op, op, latency, size)
            line = sb.take()
            verbose += line
            calls.append({"op": op, "msg_size_bytes": size, "latency_ms": latency})
    params = log_all.__code__.co_varnames[: log_all.__code__.co_argcount]
    log_all(me, **({"print_log": True} if "print_log" in params else {}))
    table = sb.take()
    summary = [
        {"op": op, "msg_size_bytes": size, "count": len(lat), "total_latency_ms": sum(lat)}
        for op, size, lat in COMM_CALLS
    ]
    src = "deepspeed/utils/comms_logging.py:CommsLogger"
    return [
        form(f"{src}.append", verbose, {"calls": calls}, "verbose"),
        form(f"{src}.log_all", table, {"rows": summary}, "summary"),
    ]


def job_autotuner(sb: Sandbox) -> list[Form]:
    """``Autotuner.print_tuning_results``: the summary table (printed and in summary.txt)."""
    printer = _function(sb, "deepspeed.autotuning.autotuner", "Autotuner.print_tuning_results")
    records = {
        "z0": ({"name": "z0_gas1_tmbspg235", "result_dir": "/r/z0"}, 452.75, 4),
        "z1": ({"name": "z1_gas1_tmbspg300", "result_dir": "/r/z1"}, 519.25, 5),
        "global": ({"name": "z1_gas1_tmbspg300", "result_dir": "/r/z1"}, 519.25, 0),
    }
    global_space = sb.constants().get("GLOBAL_TUNING_SPACE", "global")
    records = {global_space if k == "global" else k: v for k, v in records.items()}
    with tempfile.TemporaryDirectory() as results:
        me = Fake(
            get_best_space_records=lambda: records, results_dir=results,
            start_time=NOW - 3723.5, rm=Fake(experiment_count=10),
        )  # fmt: skip
        printer(me)
        summary = Path(results, "summary.txt")
        written = summary.read_text().splitlines() if summary.exists() else []
    expect = {
        "rows": [
            {"tuning_space": k, "num_experiments": v[2] if k != global_space else 9,
             "best_metric_val": v[1], "best_exp_name": v[0]["name"]}
            for k, v in records.items()
        ],
        "tuning_duration_s": 3723.5, "total_experiments": 9,
    }  # fmt: skip
    src = "deepspeed/autotuning/autotuner.py:Autotuner.print_tuning_results"
    return [
        form(src, sb.take(), expect, "stdout"),
        form(src, written, expect, "summary.txt"),
    ]


# ------------------------------------------------------------------------------------------
# Messages logged from inside long functions: their format strings, rendered.


class Probe:
    """A value a format string reads, named by the expression that reads it.

    Each distinct expression gets its own sample number (see :meth:`Rendering.sample`), so a
    test can tell which figure a parser took; attribute access, calls and items give probes
    of the longer expression, arithmetic and formatting give the number.
    """

    def __init__(self, path: str, rendering: Rendering) -> None:
        self._path = path
        self._rendering = rendering

    def _value(self) -> Any:
        return self._rendering.sample(self._path)

    def __getattr__(self, attr: str) -> Probe:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Probe(f"{self._path}.{attr}", self._rendering)

    def __call__(self, *args: Any, **kwargs: Any) -> Probe:
        """The probe of the call's result."""
        return Probe(f"{self._path}()", self._rendering)

    def __getitem__(self, key: Any) -> Probe:
        return Probe(f"{self._path}[{key!r}]", self._rendering)

    def __format__(self, spec: str) -> str:
        return format(self._value(), spec)

    def __str__(self) -> str:
        return str(self._value())

    def __float__(self) -> float:
        return float(self._value())

    def __int__(self) -> int:
        return int(self._value())

    def __index__(self) -> int:
        return int(self._value())

    def __round__(self, n: int | None = None) -> Any:
        return round(self._value(), n)

    def __bool__(self) -> bool:
        return bool(self._value())


def _arith(op: Callable[[Any, Any], Any], swap: bool = False) -> Callable[[Probe, Any], Any]:
    def apply(self: Probe, other: Any) -> Any:
        a = self._value()
        b = other._value() if isinstance(other, Probe) else other
        return op(b, a) if swap else op(a, b)

    return apply


for _name, _op in (
    ("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b),
    ("truediv", lambda a, b: a / b), ("floordiv", lambda a, b: a // b),
    ("mod", lambda a, b: a % b), ("pow", lambda a, b: a**b),
    ("lt", lambda a, b: a < b), ("le", lambda a, b: a <= b), ("gt", lambda a, b: a > b),
    ("ge", lambda a, b: a >= b),
):  # fmt: skip
    setattr(Probe, f"__{_name}__", _arith(_op))
    if _name not in ("lt", "le", "gt", "ge"):
        setattr(Probe, f"__r{_name}__", _arith(_op, swap=True))


class Rendering:
    """The sample numbers of one message: each expression's own, in order of first reading.

    Scales go down from 2**16 in the order the message reads them (``Attempted loss scale: X,
    reducing to Y``), or up for a message that raises the scale (``Increasing ...``).
    """

    def __init__(self, rising: bool = False) -> None:
        self.values: dict[str, Any] = {}
        powers = range(16, 32) if rising else range(16, 0, -1)
        self._scales = iter(2.0**k for k in powers)
        self._ints = iter(range(110, 10_000))
        self._floats = iter(round(1.25 + 2.5 * k, 4) for k in range(10_000))

    def sample(self, path: str) -> Any:
        """The number an expression reads: a power of two for scales, an int for counts."""
        if path not in self.values:
            last = path.rsplit(".", 1)[-1].lower()  # what the expression reads, by its name
            if "rank" in last:
                value: Any = 0
            elif "params" in last:
                value = next(self._ints) * 1000 + 7
            elif last.endswith("start"):
                value = 3
            elif last.endswith("stop"):
                value = 17
            elif any(w in last for w in _INT_WORDS):
                value = next(self._ints)
            elif "scale" in last and "factor" not in last:
                value = next(self._scales)
            else:
                value = next(self._floats)
            self.values[path] = value
        return self.values[path]


#: Words of a name that counts something (an int), checked before ``scale``.
_INT_WORDS = (
    "iter", "step", "count", "hysteresis", "window", "num", "id", "stage", "size", "shift",
    "samples", "tokens", "batch", "seqlen", "length",
)  # fmt: skip


class _Names(dict[str, Any]):
    """The names a format string is evaluated with: a probe for each."""

    def __init__(self, rendering: Rendering) -> None:
        super().__init__()
        self._rendering = rendering

    def __missing__(self, key: str) -> Any:
        return Probe(key, self._rendering)


_PRINTERS = {"print", "print_rank_0", "print_dist", "log_dist", "logging", "_log"}
_LEVELS = {"info": "INFO", "warning": "WARNING", "warn": "WARNING", "error": "ERROR",
           "debug": "DEBUG", "critical": "CRITICAL"}  # fmt: skip


def _printer(call: ast.Call) -> str | None:
    """How a call prints its first argument: ``print``, ``log_dist``, a logger level, or None."""
    f = call.func
    if isinstance(f, ast.Name) and f.id in _PRINTERS:
        return f.id
    if isinstance(f, ast.Attribute):
        if f.attr in _LEVELS and isinstance(f.value, ast.Name | ast.Attribute):
            return _LEVELS[f.attr]
        if f.attr in _PRINTERS:
            return f.attr
    return None


def render_messages(sb: Sandbox, folders: tuple[str, ...], keywords: tuple[str, ...]) -> list[Form]:
    """Every message logged in ``folders`` whose text holds a keyword, rendered with probes."""
    out: list[Form] = []
    log_dist_line = _log_dist_line(sb)
    for rel, tree, text in py_files(sb):
        if not rel.startswith(folders) or not any(k in text for k in keywords):
            continue
        for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            for call in (n for n in ast.walk(func) if isinstance(n, ast.Call)):
                how = _printer(call)
                if how is None or not call.args:
                    continue
                built = _building(func, call) if isinstance(call.args[0], ast.Name) else []
                literal = " ".join(
                    str(c.value)
                    for part in [call.args[0], *(value for value, _ in built)]
                    for c in ast.walk(part)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                )
                if not any(k in literal for k in keywords):
                    continue
                rendering = Rendering(rising="Increasing" in literal)
                try:
                    message = (
                        _evaluate_built(built, rendering) if built else _evaluate(call, rendering)
                    )
                except Exception:  # noqa: BLE001 - a format this sandbox cannot evaluate
                    continue
                if how == "log_dist":
                    head = f"[{STAMP}] [INFO] [logging.py:{log_dist_line}:log_dist] [Rank 0] "
                elif how in _LEVELS.values() or how in ("logging", "_log"):
                    level = how if how in _LEVELS.values() else "INFO"
                    head = _header(sb, level, sb.root / rel, call.lineno, func.name)
                elif how == "print_dist":
                    head = "[Rank 0] "
                else:
                    head = ""
                lines = (head + message).splitlines()
                values = {k: v for k, v in rendering.values.items()}
                out.append(form(f"{rel}:{func.name}", lines, {"values": values}, "rendered"))
    return out


def _building(func: ast.FunctionDef, call: ast.Call) -> list[tuple[ast.expr, list[str]]]:
    """How a function builds the message it prints by name: ``s = f'...'``, ``s += f'...'``.

    Each piece with the loop variables it is built under (a loop's piece is taken once).
    """
    assert isinstance(call.args[0], ast.Name)
    name = call.args[0].id
    pieces: list[tuple[int, ast.expr, list[str]]] = []

    def visit(node: ast.AST, loop_vars: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = loop_vars
            if isinstance(child, ast.For):
                inner = loop_vars + [
                    n.id for n in ast.walk(child.target) if isinstance(n, ast.Name)
                ]
            target = getattr(child, "target", None)
            targets = getattr(child, "targets", [target])
            if (
                isinstance(child, ast.Assign | ast.AugAssign)
                and child.lineno < call.lineno
                and any(isinstance(t, ast.Name) and t.id == name for t in targets)
            ):
                if isinstance(child, ast.Assign):
                    pieces.clear()
                pieces.append((child.lineno, child.value, inner))
            visit(child, inner)

    visit(func, [])
    return [(value, loop_vars) for _, value, loop_vars in sorted(pieces, key=lambda p: p[0])]


def _evaluate_built(built: list[tuple[ast.expr, list[str]]], rendering: Rendering) -> str:
    """The message a function builds piece by piece; a loop's variables name one extra loss."""
    names = _Names(rendering)
    names["__builtins__"] = {"str": str, "int": int, "float": float, "round": round}
    text = ""
    for value, loop_vars in built:
        for var in loop_vars:
            names[var] = "moe_loss" if "name" in var else Probe(var, rendering)
        text += str(eval(compile(ast.Expression(value), "<message>", "eval"), names))
    return text


def _evaluate(call: ast.Call, rendering: Rendering) -> str:
    """A logging call's message, ``%`` arguments applied as logging applies them."""
    names = _Names(rendering)
    names["__builtins__"] = {"str": str, "int": int, "float": float, "round": round,
                             "max": max, "min": min, "len": lambda x: 3}  # fmt: skip
    message = eval(compile(ast.Expression(call.args[0]), "<message>", "eval"), names)
    if len(call.args) > 1 and isinstance(message, str) and "%" in message:
        args = tuple(
            eval(compile(ast.Expression(a), "<arg>", "eval"), names) for a in call.args[1:]
        )
        message = message % tuple(a._value() if isinstance(a, Probe) else a for a in args)
    return str(message)


def _log_dist_line(sb: Sandbox) -> int:
    """The line of ``log_dist``'s logger call, which its header names."""
    tree = ast.parse(source_of(sb, "deepspeed.utils.logging") or "pass")
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "log_dist":
            for sub in ast.walk(node):
                if (
                    isinstance(sub, ast.Call)
                    and isinstance(sub.func, ast.Attribute)
                    and isinstance(sub.func.value, ast.Name)
                    and sub.func.value.id == "logger"
                ):
                    return sub.lineno
    return 0


LOSS_SCALE_WORDS = ("OVERFLOW", "verflow", "loss scale", "hysteresis", "Hysteresis")


def job_loss_scale_messages(sb: Sandbox) -> list[Form]:
    """Every loss-scale message of the fp16, bf16 and ZeRO optimizers, rendered."""
    return render_messages(sb, ("deepspeed/runtime/",), LOSS_SCALE_WORDS)


def job_pipeline(sb: Sandbox) -> list[Form]:
    """The pipeline engine's ``steps:`` progress line and its ``STAGE_PARAMS`` line, rendered."""
    return render_messages(sb, ("deepspeed/runtime/pipe/",), ("steps: ", "STAGE_PARAMS="))


# ------------------------------------------------------------------------------------------
# The flops profiler, run on a tiny CPU model with the real torch.

#: The tiny model's modules (path, class) in ``named_modules`` order, and its parameters.
FLOPS_MODULES = [
    ("", "TinyNet"), ("embed", "Linear"), ("block", "Sequential"), ("block.0", "Linear"),
    ("block.1", "ReLU"), ("block.2", "Linear"), ("norm", "LayerNorm"), ("head", "Linear"),
]  # fmt: skip
FLOPS_PARAMS = 16 * 32 + 32 + 32 * 64 + 64 + 64 * 32 + 32 + 2 * 32 + 32 * 8 + 8
#: The engine's timers when the profile is printed (ms): what its latencies are read from.
ENGINE_MS = {"fwd": 12.5, "bwd": 25.0, "step": 5.0}


def _tiny_model() -> Any:
    import torch
    from torch import nn

    class TinyNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Linear(16, 32)
            self.block = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))
            self.norm = nn.LayerNorm(32)
            self.head = nn.Linear(32, 8)

        def forward(self, x: Any) -> Any:
            return self.head(self.norm(self.block(self.embed(x))))

    torch.manual_seed(0)
    return TinyNet()


def job_flops(sb: Sandbox) -> list[Form]:
    """The profiler's block, on :func:`_tiny_model` with the real torch.

    As the engine prints it (with the engine's figures) and as ``get_model_profile`` prints
    it alone.
    """
    import torch

    torch.cuda.synchronize = lambda *a, **k: None  # a CPU build: this process only
    tsb = Sandbox(sb.root, real_torch=True)
    profiler = tsb.load("deepspeed.profiling.flops_profiler.profiler")
    text = source_of(tsb, "deepspeed.profiling.flops_profiler.profiler")
    per_ms = 1.0 if re.search(r"elapsed\(False\)\s*/\s*1000", text) else 1000.0
    out: list[Form] = []
    model = _tiny_model()
    cls = member(profiler, "FlopsProfiler")
    init_params = cls.__init__.__code__.co_varnames
    engine = Fake(
        world_size=2, dp_world_size=2, seq_dp_world_size=2, mp_world_size=1,
        has_moe_layers=False, train_micro_batch_size_per_gpu=lambda: 4,
        wall_clock_breakdown=lambda: True, timers=lambda name: _engine_timer(name, per_ms),
    )  # fmt: skip
    prof = cls(model, ds_engine=engine) if "ds_engine" in init_params else cls(model)
    prof.ds_engine = engine if "ds_engine" in init_params else None
    prof.start_profile()
    with torch.no_grad():
        model(torch.ones(4, 16))
    if hasattr(prof, "stop_profile"):
        prof.stop_profile()
    printer = prof.print_model_profile
    params = printer.__code__.co_varnames[: printer.__code__.co_argcount]
    kwargs = {"profile_step": 5, "module_depth": -1, "top_modules": 3, "detailed": True}
    printer(**{k: v for k, v in kwargs.items() if k in params})
    prof.end_profile()
    expect = {
        "profile_step": 5, "params": FLOPS_PARAMS, "modules": FLOPS_MODULES,
        "engine": prof.ds_engine is not None, "world_size": 2, "data_parallel_size": 2,
        "model_parallel_size": 1, "batch_size_per_gpu": 4,
        "fwd_latency_ms": ENGINE_MS["fwd"], "bwd_latency_ms": ENGINE_MS["bwd"],
        "step_latency_ms": ENGINE_MS["step"],
    }  # fmt: skip
    src = "deepspeed/profiling/flops_profiler/profiler.py"
    out.append(form(f"{src}:FlopsProfiler.print_model_profile", tsb.take(), expect, "engine"))
    get = member(profiler, "get_model_profile")
    args = get.__code__.co_varnames[: get.__code__.co_argcount]
    shape = {"input_shape": (4, 16)} if "input_shape" in args else {"input_res": (16,)}
    get(model=_tiny_model(), **shape, print_profile=True, detailed=True, top_modules=3)
    expect = {"params": FLOPS_PARAMS, "modules": FLOPS_MODULES, "engine": False}
    out.append(form(f"{src}:get_model_profile", tsb.take(), expect, "standalone"))
    return out


def _engine_timer(name: str, per_ms: float) -> Fake:
    """An engine timer whose ``elapsed`` reads in the release's unit (ms, or s before 0.6.3)."""
    ms = _engine_ms(name)
    return Fake(elapsed=lambda reset=True: ms / per_ms)


def _engine_ms(name: str) -> float:
    """The engine timer a profiler reads, by any of its names (``forward``, ``fwd``...)."""
    if name.startswith(("fwd", "forward")):
        return ENGINE_MS["fwd"]
    if name.startswith(("bwd", "backward")):
        return ENGINE_MS["bwd"]
    return ENGINE_MS["step"]


# ------------------------------------------------------------------------------------------
# Driving it: each release in a process of its own (the flops profiler patches torch).

#: Output kinds, each with the jobs that print it and the first release that can have it.
JOBS: dict[str, tuple[Callable[[Sandbox], list[Form]], ...]] = {
    "timers": (job_timers,),
    "step": (job_step,),
    "throughput": (job_throughput,),
    "loss_scale": (job_loss_scaler, job_loss_scale_messages),
    "memory": (job_memory,),
    "config": (job_config,),
    "comms": (job_comms,),
    "autotuner": (job_autotuner,),
    "pipeline": (job_pipeline,),
    "flops": (job_flops,),
}
_HEADER_LINE = re.compile(r"(\[[\w.]+\.py:)\d+(:\w+\])")


def run_release(version: str) -> dict[str, Any]:
    """Every job on one release: {kind: {"forms": [...], "error": "..."}}."""
    sb = Sandbox(cache_dir() / version)
    result: dict[str, Any] = {}
    for kind, jobs in JOBS.items():
        forms: list[Form] = []
        errors: list[str] = []
        for job in jobs:
            sb.take()
            try:
                with contextlib.redirect_stdout(io.StringIO()):  # a stray real print()
                    forms += job(sb)
            except Exception as exc:  # noqa: BLE001 - a release this sandbox cannot run: said so
                last = traceback.extract_tb(exc.__traceback__)[-1]
                errors.append(f"{job.__name__}: {type(exc).__name__}: {exc} ({last.name})")
        result[kind] = {"forms": [f for f in forms if f["lines"]], "errors": errors}
    return result


def _key(form: Form) -> str:
    """A form's identity across releases: the same lines but for the header's line numbers."""
    lines = [_HEADER_LINE.sub(r"\1N\2", ln) for ln in form["lines"]]
    return json.dumps([form["source"], form["case"], lines, form["expect"]], sort_keys=True)


def merge(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kind: the distinct forms with the releases printing each, and what could not run."""
    out: dict[str, dict[str, Any]] = {}
    for kind in JOBS:
        forms: dict[str, Form] = {}
        missing: dict[str, str] = {}
        for version, result in results.items():
            got = result.get(kind, {"forms": [], "errors": ["no result"]})
            for f in got["forms"]:
                key = _key(f)
                if key not in forms:
                    forms[key] = {**f, "releases": []}
                forms[key]["releases"].append(version)
            if not got["forms"]:
                missing[version] = "; ".join(got["errors"]) or "prints nothing of this kind"
        out[kind] = {
            "kind": kind,
            "generated_by": "scripts/deepspeed_formats.py",
            "releases": list(results),
            "note": "each form's lines are its first release's; the others print the same "
            "but for the line numbers in the logger header",
            "forms": list(forms.values()),
            "missing": missing,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    """Run every cached release (or those named) and write the oracle files."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--versions", nargs="*", help="releases to run (default: every cached one)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"where to write (default {OUT})")
    ap.add_argument("--jobs", type=int, default=2, help="releases run at once")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # the child process: one release
    args = ap.parse_args(argv)
    if args.one:
        json.dump(run_release(args.one), sys.stdout)
        return 0
    cached = sorted((p.name for p in cache_dir().iterdir() if (p / "deepspeed").is_dir()),
                    key=version_key)  # fmt: skip
    versions = args.versions or cached

    def child(version: str) -> tuple[str, dict[str, Any]]:
        proc = subprocess.run(
            [sys.executable, __file__, "--one", version],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        if proc.returncode != 0:
            err = proc.stderr.strip().splitlines()[-1:] or ["failed"]
            return version, {k: {"forms": [], "errors": err} for k in JOBS}
        print(f"deepspeed_formats: {version}", file=sys.stderr)
        return version, json.loads(proc.stdout)

    with ThreadPoolExecutor(args.jobs) as pool:
        results = dict(pool.map(child, versions))
    results = {v: results[v] for v in sorted(results, key=version_key)}
    args.out.mkdir(parents=True, exist_ok=True)
    for kind, data in merge(results).items():
        path = args.out / f"{kind}.json"
        path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
        n = len(data["releases"]) - len(data["missing"])
        print(f"{path}: {len(data['forms'])} forms, {n}/{len(data['releases'])} releases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
