#!/usr/bin/env python3
"""What every DeepSpeed release reads from a ds_config, taken from its source with ``ast``.

dsmon's config rules must judge a config against the DeepSpeed that ran: which keys it reads,
their defaults, which sections refuse unknown keys, which optimizer and scheduler names it
builds, which keys it refuses outright or ignores in some case. Every release's source is in
the cache of ``scripts/deepspeed_releases.py``; this script reads each one without importing
it (no torch needed) and writes the result, compact, to ``dsmon/data/ds_config/releases.json``,
which :mod:`dsmon.ds_config.schema` and :mod:`dsmon.ds_config.names` load. Run it by hand after
fetching a new release, and commit its output:

    python scripts/deepspeed_releases.py fetch --all
    python scripts/ds_config_knowledge.py            # writes dsmon/data/ds_config/releases.json
    python scripts/ds_config_knowledge.py --check    # exit 1 when the committed file is stale

How keys are found, from ``DeepSpeedConfig`` (``runtime/config.py``) outwards:

- The dict the user wrote is followed through the code: ``DeepSpeedConfig._initialize_params``
  gets it as its argument; a variable assigned ``d[KEY]`` or ``d.get(KEY, ...)`` holds the
  section KEY of ``d``; a function or class called with such a variable receives that section
  (followed across modules, until nothing new is bound).
- A key is read where such a dict is read: ``get_scalar_param(d, KEY, DEFAULT)`` (and
  ``get_list_param``/``get_dict_param``), ``d.get(KEY, DEFAULT)``, ``d[KEY]``, ``KEY in d``.
- A pydantic model built from a section (``Model(**d)``) reads its fields there (with their
  aliases and ``deprecated``/``new_param`` markers); a field typed as another model is a
  nested section. A model whose config says ``extra = "forbid"`` refuses unknown keys.
- Names are resolved through each module's constants and imports (``FP16_ENABLED_DEFAULT``),
  enum members to their values, ``int(5e8)``/``pp_int(5e8)`` to numbers.

What else is read per release: ``DEEPSPEED_OPTIMIZERS`` (the names DeepSpeed builds itself,
any case), the scheduler classes of ``runtime/lr_schedules.py``, the keys DeepSpeed refuses
with an error (``_REMOVED_*_CONFIG_KEYS``, 0.19.7+), and the one known case of a key read but
ignored: ZeRO-1/2's ``allgather_bucket_size``, unused when ``all_gather_dp_groups`` takes
``all_gather_into_tensor`` (any torch that has it or ``_all_gather_base``); and whether the
engine has ``compile()`` (``features``), which advice about torch.compile names.

The output is compact: releases are listed once, and each fact is a list of release ranges
(``[first, last]``) or of change points (``[first, value]``).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "dsmon" / "data" / "ds_config" / "releases.json"

#: Getter helpers of runtime/config_utils.py: (dict, key, default).
_GETTERS = frozenset({"get_scalar_param", "get_list_param", "get_dict_param"})
#: Where a ds_config enters DeepSpeed: (module, class, method, parameter index without self).
_ROOT = ("deepspeed.runtime.config", "DeepSpeedConfig", "_initialize_params", 0)
#: Bases that make a class a pydantic model.
_PYDANTIC_BASES = frozenset({"BaseModel", "DeepSpeedConfigModel"})
_MAXSIZE = 2**63 - 1
#: What a config key looks like (a constant holding a help text is no key).
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _releases_module() -> Any:
    """scripts/deepspeed_releases.py, imported by path (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "deepspeed_releases", Path(__file__).with_name("deepspeed_releases.py")
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class UnresolvedError(Exception):
    """An expression whose value the source alone does not give."""


@dataclass
class Module:
    """One parsed module of a release: its tree, constants, imports, functions and classes."""

    name: str
    tree: ast.Module
    assigns: dict[str, ast.expr] = field(default_factory=dict)
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)  # alias -> (module, name)
    star: list[str] = field(default_factory=list)
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)


class Release:
    """The parsed source of one DeepSpeed release, read lazily module by module."""

    def __init__(self, root: Path) -> None:
        self.root = root  # the folder holding deepspeed/
        self._modules: dict[str, Module | None] = {}

    def module(self, name: str) -> Module | None:
        """The module ``deepspeed.x.y`` parsed, or None when the release has no such file."""
        if name in self._modules:
            return self._modules[name]
        rel = Path(*name.split("."))
        path = next(
            (p for p in (self.root / f"{rel}.py", self.root / rel / "__init__.py") if p.is_file()),
            None,
        )
        found = _parse(name, path, is_package=path is not None and path.name == "__init__.py")
        self._modules[name] = found
        return found


def _parse(name: str, path: Path | None, *, is_package: bool) -> Module | None:
    """A module's top-level names; relative imports made absolute."""
    if path is None:
        return None
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except SyntaxError:
        return None
    mod = Module(name, tree)
    package = name if is_package else name.rpartition(".")[0]
    for node in tree.body:
        _index(mod, node, package)
    return mod


def _index(mod: Module, node: ast.stmt, package: str) -> None:
    """Record one top-level statement (also inside a top-level ``try``/``if``)."""
    if isinstance(node, ast.Assign):  # the last assignment is the one in force
        for target in node.targets:
            if isinstance(target, ast.Name):
                mod.assigns[target.id] = node.value
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
        mod.assigns[node.target.id] = node.value
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            parts = parts[: len(parts) - node.level + 1]
            base = ".".join([*parts, *([node.module] if node.module else [])])
        for alias in node.names:
            if alias.name == "*":
                mod.star.append(base)
            else:
                mod.imports[alias.asname or alias.name] = (base, alias.name)
    elif isinstance(node, ast.FunctionDef):
        mod.functions.setdefault(node.name, node)
    elif isinstance(node, ast.ClassDef):
        mod.classes.setdefault(node.name, node)
    elif isinstance(node, ast.Try | ast.If):
        for inner in [*node.body, *getattr(node, "orelse", [])]:
            _index(mod, inner, package)


class Names:
    """Name resolution and constant evaluation over one release."""

    def __init__(self, release: Release) -> None:
        self.release = release

    def lookup(
        self, mod: Module, name: str, seen: frozenset[str] = frozenset()
    ) -> tuple[str, Module, Any] | None:
        """Where ``name`` is defined as seen from ``mod``: ("assign"|"function"|"class"|"module")."""
        key = f"{mod.name}:{name}"
        if key in seen:
            return None
        seen = seen | {key}
        if name in mod.assigns:
            return "assign", mod, mod.assigns[name]
        if name in mod.functions:
            return "function", mod, mod.functions[name]
        if name in mod.classes:
            return "class", mod, mod.classes[name]
        if name in mod.imports:
            src, orig = mod.imports[name]
            target = self.release.module(src)
            if target is not None:
                found = self.lookup(target, orig, seen)
                if found:
                    return found
            sub = self.release.module(f"{src}.{orig}")
            if sub is not None:
                return "module", sub, None
            return None
        for src in mod.star:
            target = self.release.module(src)
            if target is not None:
                found = self.lookup(target, name, seen)
                if found:
                    return found
        return None

    def value(self, mod: Module, node: ast.expr, depth: int = 0) -> Any:
        """The value of a constant expression; :class:`UnresolvedError` when it has none here."""
        if depth > 20:
            raise UnresolvedError("too deep")
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            found = self.lookup(mod, node.id)
            if found and found[0] == "assign":
                return self.value(found[1], found[2], depth + 1)
            raise UnresolvedError(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd | ast.Not):
            v = self.value(mod, node.operand, depth + 1)
            return (
                -v
                if isinstance(node.op, ast.USub)
                else (not v if isinstance(node.op, ast.Not) else v)
            )
        if isinstance(node, ast.BinOp):
            a, b = self.value(mod, node.left, depth + 1), self.value(mod, node.right, depth + 1)
            ops = {
                ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
                ast.Div: lambda: a / b, ast.FloorDiv: lambda: a // b, ast.Pow: lambda: a**b,
                ast.LShift: lambda: a << b, ast.Mod: lambda: a % b,
            }  # fmt: skip
            if type(node.op) in ops:
                try:
                    return ops[type(node.op)]()
                except Exception as exc:
                    raise UnresolvedError("arithmetic") from exc
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            return [self.value(mod, e, depth + 1) for e in node.elts]
        if isinstance(node, ast.Dict):
            return {
                str(self.value(mod, k, depth + 1)): self.value(mod, v, depth + 1)
                for k, v in zip(node.keys, node.values, strict=True)
                if k is not None
            }
        if isinstance(node, ast.JoinedStr):
            return "".join(
                str(self.value(mod, v.value, depth + 1))
                if isinstance(v, ast.FormattedValue)
                else str(v.value)  # type: ignore[attr-defined]
                for v in node.values
            )
        if isinstance(node, ast.Attribute):
            return self._attribute(mod, node, depth)
        if isinstance(node, ast.Call):
            return self._call(mod, node, depth)
        raise UnresolvedError(ast.dump(node)[:40])

    def _attribute(self, mod: Module, node: ast.Attribute, depth: int) -> Any:
        """``sys.maxsize``; ``Enum.member`` to the member's value."""
        if isinstance(node.value, ast.Name):
            if node.value.id == "sys" and node.attr == "maxsize":
                return _MAXSIZE
            found = self.lookup(mod, node.value.id)
            if found and found[0] == "class":
                for stmt in found[2].body:
                    if isinstance(stmt, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == node.attr for t in stmt.targets
                    ):
                        v = self.value(found[1], stmt.value, depth + 1)
                        return v[0] if isinstance(v, list) and v else v
            if found and found[0] == "module":
                inner = found[1]
                if node.attr in inner.assigns:
                    return self.value(inner, inner.assigns[node.attr], depth + 1)
        raise UnresolvedError("attribute")

    def _call(self, mod: Module, node: ast.Call, depth: int) -> Any:
        """``int(x)``, ``float(x)``, ``pp_int(x)``, ``dict()``, ``list()``, ``str(x)``."""
        fn = node.func.id if isinstance(node.func, ast.Name) else None
        if fn in {"int", "pp_int"} and node.args:
            return int(self.value(mod, node.args[0], depth + 1))
        if fn == "float" and node.args:
            return float(self.value(mod, node.args[0], depth + 1))
        if fn == "str" and node.args:
            return str(self.value(mod, node.args[0], depth + 1))
        if fn in {"dict", "list", "set"} and not node.args and not node.keywords:
            return {} if fn == "dict" else []
        if fn in {"list", "tuple", "sorted"} and len(node.args) == 1:
            return list(self.value(mod, node.args[0], depth + 1))
        raise UnresolvedError(f"call {fn}")


def _jsonable(value: Any) -> Any:
    """A default as JSON holds it: infinities as DeepSpeed's words, sets as lists."""
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, list | tuple | set):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise UnresolvedError(type(value).__name__)


@dataclass
class KeyFacts:
    """What one release does with one dotted key."""

    default: Any = None
    has_default: bool = False
    alias_of: str | None = None
    deprecated_for: str | None = None


@dataclass
class ReleaseFacts:
    """Everything taken from one release."""

    keys: dict[str, KeyFacts] = field(default_factory=dict)
    pydantic: set[str] = field(default_factory=set)
    strict: set[str] = field(default_factory=set)
    refused: dict[str, str] = field(default_factory=dict)
    optimizers: list[str] = field(default_factory=list)
    schedulers: list[str] = field(default_factory=list)
    ignored: dict[str, str] = field(default_factory=dict)
    features: set[str] = field(default_factory=set)
    unresolved: set[str] = field(default_factory=set)


def _join(section: str, key: str) -> str:
    return f"{section}.{key}" if section else key


class Reader:
    """Follows the user's dict through one release (see the module docstring)."""

    def __init__(self, release: Release) -> None:
        self.release = release
        self.names = Names(release)
        self.facts = ReleaseFacts()
        #: (module, qualified function name) -> {parameter: sections it receives}
        self.bound: dict[tuple[str, str], dict[str, frozenset[str]]] = {}
        #: (module, qualified function name) -> {parameter: key names callers pass in it}
        self.consts: dict[tuple[str, str], dict[str, frozenset[str]]] = {}
        #: (module, class) -> the sections a pydantic model is built from
        self.models: dict[tuple[str, str], frozenset[str]] = {}
        #: models built from a few keys picked out of a section (neither pydantic nor strict)
        self.partial: set[tuple[str, str]] = set()
        #: (module, qualified function name) -> the sections the function returns
        self.returns: dict[tuple[str, str], frozenset[str]] = {}
        self._changed = False

    # --- the walk --------------------------------------------------------------------------
    def run(self) -> ReleaseFacts:
        """Bind sections until nothing new is found, then read every key in one last pass."""
        mod_name, cls_name, method, index = _ROOT
        mod = self.release.module(mod_name)
        if mod is None or cls_name not in mod.classes:
            raise SystemExit(f"{self.release.root}: no {mod_name}.{cls_name}")
        cls = mod.classes[cls_name]
        fn = _method(cls, method)
        if fn is None:
            raise SystemExit(f"{self.release.root}: no {cls_name}.{method}")
        self._bind(mod, f"{cls_name}.{method}", _params(fn, skip_self=True)[index], "")
        for other in cls.body:  # every method of DeepSpeedConfig reads self._param_dict
            if isinstance(other, ast.FunctionDef):
                self.bound.setdefault((mod.name, f"{cls_name}.{other.name}"), {})
                for param in _params(other, skip_self=True):
                    if param in {"param_dict", "config"} and other.name == "__init__":
                        self._bind(mod, f"{cls_name}.__init__", param, "")
        for _ in range(30):
            self._changed = False
            self._pass(record=False)
            if not self._changed:
                break
        self._pass(record=True)
        self._extras()
        return self.facts

    def _pass(self, *, record: bool) -> None:
        for (m, q), params in list(self.bound.items()):
            self._walk_function(m, q, params, record=record)
        for (m, c), sections in list(self.models.items()):
            for section in sorted(sections):
                self._walk_model(m, c, section, record=record)

    def _bind(self, mod: Module, qual: str, param: str, section: str) -> None:
        params = self.bound.setdefault((mod.name, qual), {})
        if section not in params.get(param, frozenset()):
            params[param] = params.get(param, frozenset()) | {section}
            self._changed = True

    def _returns(self, mod: Module, qual: str, sections: frozenset[str]) -> None:
        had = self.returns.get((mod.name, qual), frozenset())
        if not sections <= had:
            self.returns[(mod.name, qual)] = had | sections
            self._changed = True

    def _bind_const(self, mod: Module, qual: str, param: str, key: str) -> None:
        params = self.consts.setdefault((mod.name, qual), {})
        if key not in params.get(param, frozenset()):
            params[param] = params.get(param, frozenset()) | {key}
            self._changed = True

    def _bind_model(self, mod: Module, cls: str, section: str, *, partial: bool = False) -> None:
        sections = self.models.get((mod.name, cls), frozenset())
        if section not in sections:
            self.models[(mod.name, cls)] = sections | {section}
            if partial:
                self.partial.add((mod.name, cls))
            self._changed = True

    def _walk_function(
        self, mod_name: str, qual: str, params: dict[str, frozenset[str]], *, record: bool
    ) -> None:
        mod = self.release.module(mod_name)
        if mod is None:
            return
        cls_name, _, fn_name = qual.rpartition(".")
        cls = mod.classes.get(cls_name) if cls_name else None
        fn = _method(cls, fn_name) if cls else mod.functions.get(fn_name)
        if fn is None:
            return
        env = dict(params)
        if cls is not None and cls_name == _ROOT[1] and mod_name == _ROOT[0]:
            env["self._param_dict"] = frozenset({""})
        consts = dict(self.consts.get((mod_name, qual), {}))
        for param, default in _param_defaults(fn):  # keys a parameter holds unless passed
            try:
                value = self.names.value(mod, default)
            except UnresolvedError:
                continue
            if isinstance(value, str) and _KEY.fullmatch(value):
                consts[param] = consts.get(param, frozenset()) | {value}
        _Walker(self, mod, cls, env, consts, record, (mod, qual)).run(fn.body)

    def _walk_model(self, mod_name: str, cls_name: str, section: str, *, record: bool) -> None:
        mod = self.release.module(mod_name)
        if mod is None:
            return
        whole = (mod_name, cls_name) not in self.partial
        if record and whole:
            self.facts.pydantic.add(section)
        strict = False
        for owner, cls in self._mro(mod, mod.classes[cls_name]):
            strict = strict or _forbids_extra(cls)
            for stmt in cls.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    self._field(owner, section, stmt, record=record)
        if record and strict and whole:
            self.facts.strict.add(section)

    def _mro(self, mod: Module, cls: ast.ClassDef) -> Iterator[tuple[Module, ast.ClassDef]]:
        """The class and its bases defined in this release (pydantic's own stop the walk)."""
        yield mod, cls
        for base in cls.bases:
            name = (
                base.id
                if isinstance(base, ast.Name)
                else base.attr
                if isinstance(base, ast.Attribute)
                else None
            )
            if name is None or name == "BaseModel":
                continue
            found = self.names.lookup(mod, name)
            if found and found[0] == "class":
                yield from self._mro(found[1], found[2])

    def _field(self, mod: Module, section: str, stmt: ast.AnnAssign, *, record: bool) -> None:
        """One pydantic field: its key, alias, default, deprecation, and a nested model."""
        assert isinstance(stmt.target, ast.Name)
        name = stmt.target.id
        if name.startswith("_") or name in {"model_config", "Config"}:
            return
        path = _join(section, name)
        nested = self._model_class(mod, stmt.annotation)
        if nested is not None:
            self._bind_model(nested[0], nested[1], path)
        if not record:
            return
        facts = self.facts.keys.setdefault(path, KeyFacts())
        default_node: ast.expr | None = stmt.value
        alias = deprecated_for = None
        factory: ast.expr | None = None
        if isinstance(stmt.value, ast.Call) and _callee(stmt.value) == "Field":
            call = stmt.value
            default_node = call.args[0] if call.args else None
            extra: dict[str, ast.expr] = {}
            for kw in call.keywords:
                if kw.arg == "default":
                    default_node = kw.value
                elif kw.arg == "default_factory":
                    factory = kw.value
                elif kw.arg in {"alias", "validation_alias"}:
                    alias = _literal(kw.value)
                elif kw.arg == "json_schema_extra" and isinstance(kw.value, ast.Dict):
                    extra.update(
                        {
                            str(_literal(k)): v
                            for k, v in zip(kw.value.keys, kw.value.values, strict=True)
                            if k
                        }
                    )
                elif kw.arg:
                    extra[kw.arg] = kw.value
            if _literal(extra.get("deprecated")) is True:
                new = _literal(extra.get("new_param"))
                deprecated_for = _join(section, new) if isinstance(new, str) and new else ""
        try:
            if nested is not None and (
                factory is not None or isinstance(default_node, ast.Dict | ast.Call)
            ):
                value = None  # a nested model's own defaults are its keys'
            elif factory is not None:
                value = self._factory(mod, factory)
            elif default_node is None or (
                isinstance(default_node, ast.Constant) and default_node.value is Ellipsis
            ):
                value = None
            elif nested is not None and isinstance(default_node, ast.Dict | ast.Call):
                value = None  # a nested model's own defaults are its keys'
            else:
                value = self.names.value(mod, default_node)
            facts.default, facts.has_default = _jsonable(value), True
        except UnresolvedError:
            self.facts.unresolved.add(path)
        if deprecated_for is not None:
            facts.deprecated_for = deprecated_for
        if isinstance(alias, str) and alias != name:
            self.facts.keys[_join(section, alias)] = KeyFacts(
                facts.default, facts.has_default, alias_of=path, deprecated_for=facts.deprecated_for
            )

    def _factory(self, mod: Module, node: ast.expr) -> Any:
        if isinstance(node, ast.Name) and node.id in {"dict", "list", "set"}:
            return {} if node.id == "dict" else []
        if isinstance(node, ast.Lambda):
            return self.names.value(mod, node.body)
        raise UnresolvedError("factory")

    def _model_class(self, mod: Module, annotation: ast.expr | None) -> tuple[Module, str] | None:
        """The pydantic model class a field annotation names (through Optional, Union, |)."""
        if annotation is None:
            return None
        for node in ast.walk(annotation):
            name = node.id if isinstance(node, ast.Name) else None
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                name = node.value
            if not name:
                continue
            found = self.names.lookup(mod, name)
            if found and found[0] == "class" and self._is_model(found[1], found[2]):
                return found[1], found[2].name
        return None

    def _is_model(self, mod: Module, cls: ast.ClassDef) -> bool:
        for _owner, c in self._mro(mod, cls):
            for base in c.bases:
                name = (
                    base.id
                    if isinstance(base, ast.Name)
                    else base.attr
                    if isinstance(base, ast.Attribute)
                    else ""
                )
                if name in _PYDANTIC_BASES:
                    return True
        return False

    # --- release-wide facts ------------------------------------------------------------------
    def _extras(self) -> None:
        """Optimizer and scheduler names, refused keys, the allgather case."""
        cfg = self.release.module("deepspeed.runtime.config")
        assert cfg is not None
        if "DEEPSPEED_OPTIMIZERS" in cfg.assigns:
            self.facts.optimizers = sorted(
                self.names.value(cfg, cfg.assigns["DEEPSPEED_OPTIMIZERS"])
            )
        sched = self.release.module("deepspeed.runtime.lr_schedules")
        if sched is not None:
            self.facts.schedulers = sorted(sched.classes)
        for table, section in (
            ("_REMOVED_TOP_LEVEL_CONFIG_KEYS", ""),
            ("_REMOVED_ZERO_CONFIG_KEYS", "zero_optimization"),
        ):
            if table in cfg.assigns:
                node = cfg.assigns[table]
                if isinstance(node, ast.Dict):
                    for k, v in zip(node.keys, node.values, strict=True):
                        key = _literal(k)
                        try:
                            message = self.names.value(cfg, v)
                        except UnresolvedError:
                            message = _text(v)
                        if isinstance(key, str):
                            self.facts.refused[_join(section, key)] = str(message).strip()
        engine = self.release.module("deepspeed.runtime.engine")
        if engine is not None and _method(engine.classes.get("DeepSpeedEngine"), "compile"):
            self.facts.features.add("engine.compile")
        utils = self.release.module("deepspeed.runtime.utils")
        fn = utils.functions.get("all_gather_dp_groups") if utils else None
        if fn is not None and _starts_with_into_tensor_return(fn):
            self.facts.ignored["zero_optimization.allgather_bucket_size"] = (
                "ZeRO-1/2 gather the updated partitions with all_gather_into_tensor (one call per "
                "parameter group) whenever torch has it or _all_gather_base: the bucket size only "
                "sizes the fallback"
            )


class _Walker:
    """One function body: sections held by variables, keys read, sections handed on.

    ``env`` maps a variable (``name`` or ``self.name``) to the sections it may hold (a variable
    assigned ``d.get("bf16")`` and then ``d.get("bfloat16")`` holds either); ``consts`` maps a
    parameter to the key names callers pass in it (``get_scalar_param(d, comm_type, ...)``).
    """

    def __init__(
        self,
        reader: Reader,
        mod: Module,
        cls: ast.ClassDef | None,
        env: dict[str, frozenset[str]],
        consts: dict[str, frozenset[str]],
        record: bool,
        where: tuple[Module, str],
    ) -> None:
        self.r, self.mod, self.cls, self.record, self.where = reader, mod, cls, record, where
        #: variables assigned a dict literal: a section merged into one has its keys as defaults
        self.literals: dict[str, ast.Dict] = {}
        self.env = dict(env)
        self.consts = consts
        #: variables holding a dict built from some keys of a section (the monitor's): a model
        #: built from one reads those keys only, so it says nothing about the section's others
        self.views: set[str] = set()

    def run(self, body: list[ast.stmt]) -> None:
        """The statements in source order, nested blocks included (not nested definitions)."""
        for stmt in body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            blocks = [
                getattr(stmt, name)
                for name in ("body", "orelse", "finalbody")
                if isinstance(getattr(stmt, name, None), list)
            ]
            blocks += [h.body for h in getattr(stmt, "handlers", [])]
            if not blocks:
                self.simple(stmt)
                continue
            if isinstance(stmt, ast.For):
                self.merged_defaults(stmt)
                self.loop_keys(stmt)
            for header in ("test", "iter", "items", "subject"):
                node = getattr(stmt, header, None)
                for part in node if isinstance(node, list) else [node] if node is not None else []:
                    self.expressions(part)
            for block in blocks:
                self.run(block)

    def loop_keys(self, loop: ast.For) -> None:
        """``for key in [BFLOAT16, BFLOAT16_OLD]``: the loop variable holds those key names."""
        if isinstance(loop.target, ast.Name) and isinstance(loop.iter, ast.List | ast.Tuple):
            names = {k for e in loop.iter.elts for k in self.keys(e)}
            if names:
                self.consts = {**self.consts, loop.target.id: frozenset(names)}

    def merged_defaults(self, loop: ast.For) -> None:
        """``for k, v in section.items(): config[k] = v`` over ``config = {defaults}``."""
        it = loop.iter
        if not (
            isinstance(it, ast.Call)
            and isinstance(it.func, ast.Attribute)
            and it.func.attr == "items"
        ):
            return
        sections = self.section_of(it.func.value)
        for inner in loop.body:
            if isinstance(inner, ast.Assign) and isinstance(inner.targets[0], ast.Subscript):
                literal = self.literals.get(_var(inner.targets[0].value) or "")
                if literal is None:
                    continue
                for k, v in zip(literal.keys, literal.values, strict=True):
                    if k is not None:
                        for section in sections:
                            self.read_each(frozenset({section}), k, v)

    def simple(self, stmt: ast.stmt) -> None:
        """One statement without blocks: a section bound by assignment, then what it reads."""
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            sections = self.section_of(stmt.value)
            if sections:
                self.r._returns(self.where[0], self.where[1], sections)
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Dict | ast.Name):
            literal = (
                stmt.value if isinstance(stmt.value, ast.Dict) else self.literals.get(stmt.value.id)
            )
            for t in stmt.targets:
                if literal is not None and _var(t):
                    self.literals[_var(t) or ""] = literal
        if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            sections = self.section_of(stmt.value)
            for t in targets:
                name = _var(t)
                if name and sections:
                    self.env[name] = self.env.get(name, frozenset()) | sections
                    if isinstance(stmt.value, ast.DictComp):
                        self.views.add(name)
        self.expressions(stmt)

    def expressions(self, root: ast.AST) -> None:
        for node in ast.walk(root):
            if isinstance(node, ast.Call):
                self.call(node)
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                self.read_each(self.section_of(node.value), node.slice, None)
            elif (
                isinstance(node, ast.Compare)
                and len(node.ops) == 1
                and isinstance(node.ops[0], ast.In | ast.NotIn)
            ):
                self.read_each(self.section_of(node.comparators[0]), node.left, None)

    def keys(self, node: ast.expr) -> list[str]:
        """The key names an expression stands for: a constant, or a parameter's callers' keys."""
        if isinstance(node, ast.Name) and node.id in self.consts:
            return sorted(self.consts[node.id])
        try:
            value = self.r.names.value(self.mod, node)
        except UnresolvedError:
            return []
        return [value] if isinstance(value, str) and _KEY.fullmatch(value) else []

    def section_of(self, node: ast.expr) -> frozenset[str]:
        """The sections a dict expression may hold.

        A variable that holds one, ``d[K]``, ``d.get(K, ...)``, a copy, what a function returns,
        ``{k: d.get(k) for k in ...}`` (a view of ``d``).
        """
        name = _var(node)
        if name is not None and name in self.env:
            return self.env[name]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in {"keys", "copy", "items"}:
                return self.section_of(node.func.value)
            if node.func.attr == "get" and node.args:
                return self._child(self.section_of(node.func.value), node.args[0])
        if (
            isinstance(node, ast.Call)
            and _callee(node) in {"copy", "deepcopy", "dict"}
            and node.args
        ):
            return self.section_of(node.args[0])
        if isinstance(node, ast.Call):
            target = self.callee(node)
            if target is not None and target[0] in {"function", "method"}:
                qual = target[2].name
                if target[0] == "method" and self.cls is not None:
                    qual = f"{self.cls.name}.{qual}"
                return self.r.returns.get((target[1].name, qual), frozenset())
        if isinstance(node, ast.Subscript):
            return self._child(self.section_of(node.value), node.slice)
        if isinstance(node, ast.DictComp):
            value = node.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
                return (
                    self.section_of(value.func.value) if value.func.attr == "get" else frozenset()
                )
            return self.section_of(value.value) if isinstance(value, ast.Subscript) else frozenset()
        if isinstance(node, ast.IfExp):
            return self.section_of(node.body) | self.section_of(node.orelse)
        if isinstance(node, ast.BoolOp):
            return frozenset().union(*(self.section_of(v) for v in node.values))
        return frozenset()

    def _child(self, bases: frozenset[str], key: ast.expr) -> frozenset[str]:
        return (
            frozenset(_join(b, k) for b in bases for k in self.keys(key)) if bases else frozenset()
        )

    def read_each(self, bases: frozenset[str], key: ast.expr, default: ast.expr | None) -> None:
        if not self.record or not bases:
            return
        for base in bases:
            for k in self.keys(key):
                self.read(base, k, default)

    def read(self, section: str, key: str, default: ast.expr | None) -> None:
        path = _join(section, key)
        facts = self.r.facts.keys.setdefault(path, KeyFacts())
        if default is not None and not facts.has_default:
            try:
                value = self.r.names.value(self.mod, default)
                facts.default, facts.has_default = _jsonable(value), True
            except UnresolvedError:
                self.r.facts.unresolved.add(path)

    def call(self, node: ast.Call) -> None:
        name = _callee(node)
        if name in _GETTERS and len(node.args) >= 2:
            default = node.args[2] if len(node.args) > 2 else None
            self.read_each(self.section_of(node.args[0]), node.args[1], default)
            return
        if isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
            default = node.args[1] if len(node.args) > 1 else None
            self.read_each(self.section_of(node.func.value), node.args[0], default)
            return
        self.hand_on(node)

    def hand_on(self, node: ast.Call) -> None:
        """A call given a section: bind the callee's parameter, or the model built from it."""
        target = self.callee(node)
        for kw in node.keywords:
            if kw.arg is None and target and target[0] == "class":  # Model(**d)
                view = isinstance(kw.value, ast.DictComp) or _var(kw.value) in self.views
                for section in self.section_of(kw.value):
                    self.r._bind_model(target[1], target[2].name, section, partial=view)
        if target is None:
            return
        kind, mod, obj = target
        if kind == "class":
            init = _method(obj, "__init__")
            if init is None:
                return
            qual, params = f"{obj.name}.__init__", _params(init, skip_self=True)
        elif kind == "method":
            qual = f"{self.cls.name}.{obj.name}" if self.cls else obj.name
            params = _params(obj, skip_self=True)
        else:
            qual, params = obj.name, _params(obj, skip_self=False)
        given = [(params[i], arg) for i, arg in enumerate(node.args) if i < len(params)]
        given += [(kw.arg, kw.value) for kw in node.keywords if kw.arg in params]
        for param, arg in given:
            for section in self.section_of(arg):
                self.r._bind(mod, qual, param, section)
            for key in self.keys(arg) if self.section_of(arg) == frozenset() else []:
                self.r._bind_const(mod, qual, param, key)

    def callee(self, node: ast.Call) -> tuple[str, Module, Any] | None:
        func = node.func
        is_self = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
        if is_self and func.value.id == "self" and self.cls:  # type: ignore[union-attr]
            fn = _method(self.cls, func.attr)  # type: ignore[union-attr]
            return ("method", self.mod, fn) if fn is not None else None
        if isinstance(func, ast.Name):
            found = self.r.names.lookup(self.mod, func.id)
            if found and found[0] in {"function", "class"}:
                return found
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            found = self.r.names.lookup(self.mod, func.value.id)
            if found and found[0] == "module":
                inner = self.r.names.lookup(found[1], func.attr)
                if inner and inner[0] in {"function", "class"}:
                    return inner
        return None


def _method(cls: ast.ClassDef | None, name: str) -> ast.FunctionDef | None:
    if cls is None:
        return None
    return next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == name), None)


def _params(fn: ast.FunctionDef, *, skip_self: bool) -> list[str]:
    names = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
    return names[1:] if skip_self and names else names


def _param_defaults(fn: ast.FunctionDef) -> list[tuple[str, ast.expr]]:
    """(parameter, default expression) of the parameters that have a default."""
    args = [*fn.args.posonlyargs, *fn.args.args]
    pairs = list(
        zip(
            [a.arg for a in args[len(args) - len(fn.args.defaults) :]],
            fn.args.defaults,
            strict=True,
        )
    )
    pairs += [
        (a.arg, d)
        for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True)
        if d is not None
    ]
    return pairs


def _callee(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def _var(node: ast.expr) -> str | None:
    """``name`` or ``self.name`` as the walk's variable names."""
    if isinstance(node, ast.Name):
        return node.id
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    ):
        return f"self.{node.attr}"
    return None


def _literal(node: ast.expr | None) -> Any:
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def _text(node: ast.expr) -> str:
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant))
    return ast.unparse(node)


def _forbids_extra(cls: ast.ClassDef) -> bool:
    """``model_config = ConfigDict(extra="forbid")`` (pydantic 2) or ``class Config: extra``."""
    for stmt in cls.body:
        call = stmt.value if "model_config" in _targets(stmt) else None  # type: ignore[attr-defined]
        if isinstance(call, ast.Call) and any(
            kw.arg == "extra" and _literal(kw.value) == "forbid" for kw in call.keywords
        ):
            return True
        if isinstance(stmt, ast.ClassDef) and stmt.name == "Config":
            for inner in stmt.body:
                value = inner.value if "extra" in _targets(inner) else None  # type: ignore[attr-defined]
                forbid = isinstance(value, ast.Attribute) and value.attr == "forbid"
                if value is not None and (_literal(value) == "forbid" or forbid):
                    return True
    return False


def _targets(stmt: ast.stmt) -> set[str]:
    """The plain names an assignment statement assigns."""
    if not isinstance(stmt, ast.Assign):
        return set()
    return {t.id for t in stmt.targets if isinstance(t, ast.Name)}


def _starts_with_into_tensor_return(fn: ast.FunctionDef) -> bool:
    """``if dist.has_all_gather_into_tensor(): return ...`` as the function's first test."""
    for stmt in fn.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # docstring
        if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Call):
            name = _callee(stmt.test)
            return name == "has_all_gather_into_tensor" and any(
                isinstance(s, ast.Return) for s in stmt.body
            )
        return False
    return False


# --- folding releases into ranges ---------------------------------------------------------------
def _ranges(present: list[bool], releases: list[str]) -> list[list[str]]:
    """Release ranges [first, last] where ``present`` holds."""
    out: list[list[str]] = []
    start = None
    for i, here in enumerate(present):
        if here and start is None:
            start = i
        if not here and start is not None:
            out.append([releases[start], releases[i - 1]])
            start = None
    if start is not None:
        out.append([releases[start], releases[-1]])
    return out


def _changes(values: list[Any], releases: list[str], missing: object) -> list[list[Any]]:
    """[first release, value] wherever the value changes (skipping releases without it)."""
    out: list[list[Any]] = []
    for release, value in zip(releases, values, strict=True):
        if value is missing:
            continue
        if not out or out[-1][1] != value:
            out.append([release, value])
    return out


def fold(per_release: dict[str, ReleaseFacts]) -> dict[str, Any]:
    """The per-release facts as the compact document dsmon loads."""
    releases = list(per_release)
    facts = list(per_release.values())
    missing = object()
    keys: dict[str, Any] = {}
    for path in sorted({p for f in facts for p in f.keys}):
        entry: dict[str, Any] = {"in": _ranges([path in f.keys for f in facts], releases)}
        defaults = [
            f.keys[path].default if path in f.keys and f.keys[path].has_default else missing
            for f in facts
        ]
        changes = _changes(defaults, releases, missing)
        if changes:
            entry["default"] = changes
        aliases = _changes(
            [f.keys[path].alias_of if path in f.keys else missing for f in facts], releases, missing
        )
        if any(a[1] for a in aliases):
            entry["alias_of"] = aliases
        dep = [f.keys[path].deprecated_for if path in f.keys else None for f in facts]
        if any(d is not None for d in dep):
            entry["deprecated"] = _changes(
                [d if d is not None else missing for d in dep], releases, missing
            )
        keys[path] = entry
    sections = {}
    for path in sorted({p for f in facts for p in f.pydantic}):
        sections[path] = {
            "pydantic": _ranges([path in f.pydantic for f in facts], releases),
            "strict": _ranges([path in f.strict for f in facts], releases),
        }
    refused = {}
    for path in sorted({p for f in facts for p in f.refused}):
        refused[path] = {
            "in": _ranges([path in f.refused for f in facts], releases),
            "message": next(f.refused[path] for f in reversed(facts) if path in f.refused),
        }
    ignored = {}
    for path in sorted({p for f in facts for p in f.ignored}):
        ignored[path] = {
            "in": _ranges([path in f.ignored for f in facts], releases),
            "why": next(f.ignored[path] for f in reversed(facts) if path in f.ignored),
        }
    features = {
        name: _ranges([name in f.features for f in facts], releases)
        for name in sorted({n for f in facts for n in f.features})
    }
    return {
        "about": (
            "What each DeepSpeed release reads from a ds_config, generated by "
            "scripts/ds_config_knowledge.py from the releases' source (do not edit by hand)"
        ),
        "releases": releases,
        "keys": keys,
        "sections": sections,
        "refused": refused,
        "ignored": ignored,
        "features": features,
        "optimizers": _changes([f.optimizers for f in facts], releases, missing),
        "schedulers": _changes([f.schedulers for f in facts], releases, missing),
    }


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def collect(cache: Path) -> dict[str, ReleaseFacts]:
    """Every cached release's facts, oldest first."""
    out: dict[str, ReleaseFacts] = {}
    versions = sorted(
        (p.name for p in cache.iterdir() if (p / "deepspeed").is_dir()), key=_version_key
    )
    for version in versions:
        out[version] = Reader(Release(cache / version)).run()
    return out


def render(doc: dict[str, Any]) -> str:
    """One key per line: compact, and a new release shows as a readable diff."""
    lines = ["{"]
    items = list(doc.items())
    for i, (name, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if isinstance(value, dict) and value:
            lines.append(f"{json.dumps(name)}: {{")
            inner = list(value.items())
            for j, (k, v) in enumerate(inner):
                c = "," if j < len(inner) - 1 else ""
                lines.append(f"  {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}{c}")
            lines.append(f"}}{comma}")
        else:
            lines.append(f"{json.dumps(name)}: {json.dumps(value, separators=(',', ':'))}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write (or ``--check``, or ``--show`` one release of) the knowledge file."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cache", type=Path, default=None, help="the release cache (deepspeed_releases.py's)"
    )
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument(
        "--check", action="store_true", help="exit 1 when --out differs from a fresh run"
    )
    ap.add_argument("--show", metavar="VERSION", help="print one release's keys and stop")
    args = ap.parse_args(argv)
    cache = args.cache or _releases_module().DEFAULT_CACHE
    if args.show:
        facts = Reader(Release(cache / args.show)).run()
        for path, k in sorted(facts.keys.items()):
            extra = f" alias_of={k.alias_of}" if k.alias_of else ""
            extra += f" deprecated_for={k.deprecated_for!r}" if k.deprecated_for is not None else ""
            print(f"{path} = {k.default!r}{'' if k.has_default else ' (no default)'}{extra}")
        print("pydantic:", sorted(facts.pydantic), "\nstrict:", sorted(facts.strict))
        print("optimizers:", facts.optimizers, "\nschedulers:", facts.schedulers)
        print("refused:", sorted(facts.refused), "\nignored:", sorted(facts.ignored))
        print("unresolved:", sorted(facts.unresolved))
        return 0
    text = render(fold(collect(cache)))
    if args.check:
        same = args.out.is_file() and args.out.read_text() == text
        print(
            f"{args.out}: {'up to date' if same else 'stale: run scripts/ds_config_knowledge.py'}"
        )
        return 0 if same else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out} ({len(text) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
