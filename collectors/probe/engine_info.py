"""What the engine was started with, read from the engine itself: its config, version, backend.

At DeepSpeed's default log level (WARNING in the workers since 0.17.6) the log holds no config
dump and no version line, and many jobs never name a config file: Accelerate, PyTorch
Lightning and most training scripts build the config as a dict in code. The checklist's config
rules would then have nothing to read. The engine has it all, so rank 0's probe writes it once,
as one ``engine`` line (see docs/records.md):

- ``config``: the dict the engine was given (``DeepSpeedConfig._param_dict``, what DeepSpeed's
  own dump prints as ``json = {...}``; the Hugging Face Trainer's ``"auto"`` values are filled in
  by then);
- ``effective``: each attribute of the engine's ``DeepSpeedConfig`` as ``str()`` prints it, which
  is exactly what the dump prints after its dots, so dsmon reads both with one parser;
- ``deepspeed``, ``backend``, ``world_size``, ``device``, ``optimizer``: the facts the
  launcher's and the engine's INFO lines would have given.

Only the standard library is used, and every part is optional: a DeepSpeed release that lacks
an attribute gives a line without that part.
"""

from __future__ import annotations

import math
import sys
from typing import Any

#: Nesting beyond which a config value is written as its text (a cycle or a very deep object).
MAX_DEPTH = 32


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON can hold it: non-finite numbers as DeepSpeed prints them, objects as text.

    A JSON number cannot be inf or nan (Accelerate sets ``steps_per_print`` to inf), so those
    become ``"inf"``, ``"-inf"`` and ``"nan"``, the words the log's dump would show.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if depth < MAX_DEPTH and isinstance(value, dict):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if depth < MAX_DEPTH and isinstance(value, list | tuple):
        return [plain(v, depth + 1) for v in value]
    return str(value)


def _printed_attributes(ds_config: Any) -> dict[str, str]:
    """The attributes DeepSpeed's ``DeepSpeedConfig.print`` writes, each as its text.

    An attribute whose ``str()`` raises is left out, as it would have broken DeepSpeed's own
    dump: the others are still worth having.
    """
    out: dict[str, str] = {}
    for name in sorted(vars(ds_config)):
        if name == "_param_dict":
            continue
        try:
            out[name] = format(getattr(ds_config, name))
        except Exception:  # noqa: BLE001, S112 - one odd attribute must not cost the rest
            continue
    return out


def _version() -> dict[str, str]:
    """DeepSpeed's version line's three fields, from the imported package."""
    ds = sys.modules.get("deepspeed")
    fields = {"version": "__version__", "git_hash": "__git_hash__", "git_branch": "__git_branch__"}
    return {k: str(getattr(ds, attr)) for k, attr in fields.items() if hasattr(ds, attr)}


def _backend() -> str | None:
    """The process group's backend (``nccl``, ``gloo``...), when one is initialised."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return str(dist.get_backend())


def _class_name(obj: Any) -> str | None:
    cls = type(obj)
    return None if obj is None else f"{cls.__module__}.{cls.__qualname__}"


def _optimizer(engine: Any) -> dict[str, str | None]:
    """The optimizer DeepSpeed built (``basic``) and the one wrapping it (ZeRO, fp16, bf16).

    Which class runs the step is what ``DeepSpeed Basic Optimizer = X`` says at INFO: FusedAdam,
    DeepSpeedCPUAdam, or torch's own when ``torch_adam`` is set. Some releases take
    ``torch_adam`` out of the config dict while building it, so the dict alone cannot tell.
    """
    final = getattr(engine, "optimizer", None)
    basic = getattr(final, "optimizer", None) or final
    return {"basic": _class_name(basic), "final": _class_name(final)}


def describe(engine: Any) -> dict[str, Any]:
    """The fields of an ``engine`` line (without kind, time and rank) for one engine."""
    out: dict[str, Any] = {"deepspeed": _version(), "backend": _backend()}
    out["optimizer"] = _optimizer(engine)
    world = getattr(engine, "world_size", None)
    out["world_size"] = world if isinstance(world, int) else None
    device = getattr(engine, "device", None)
    out["device"] = None if device is None else str(device)
    ds_config = getattr(engine, "_config", None)
    if ds_config is not None and hasattr(ds_config, "__dict__"):
        out["effective"] = _printed_attributes(ds_config)
        user = getattr(ds_config, "_param_dict", None)
        out["config"] = plain(user) if isinstance(user, dict) else None
    return out
