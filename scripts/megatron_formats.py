#!/usr/bin/env python3
r"""Megatron's iteration and memory lines as every version of its source printed them.

Megatron-LM and Megatron-DeepSpeed print, on the last rank, `` iteration   100/  500 | name:
value | ...`` (``training_log``), and per rank ``[Rank N] (after N iterations) memory (MB) |
allocated: ...`` (``report_memory``). The set of fields, their names and formats changed with
almost every few commits of both repositories. This script walks their git history (a clone
or a mirror, e.g. what the ``fetch`` tool of the session gives), takes each distinct version
of those two functions, and renders the line it prints: the ``log_string`` pieces of
``training_log`` evaluated in source order with a sample value for each expression they read
(every optional field on: a superset of any one run's line), and ``report_memory`` run with
stubbed torch (see ``deepspeed_formats.py`` for the probes and stubs).

Output, committed as data (the sources never are): ``tests/oracle/megatron/iteration.json``
and ``memory.json``: each form with the repository, path and commits that print it, the line,
and for each ``log_string`` piece its text and the values it printed.

Usage::

    python scripts/megatron_formats.py --repo deepspeedai/Megatron-DeepSpeed=/path/to/clone \\
        --repo NVIDIA/Megatron-LM=/path/to/clone
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deepspeed_formats import (  # noqa: E402
    Probe,
    Rendering,
    Stub,
    _building,
    _Names,
)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "oracle" / "megatron"
#: Where each repository kept ``training_log`` and ``report_memory`` over its history.
PATHS = {
    "training_log": ("megatron/training.py", "megatron/training/training.py"),
    "report_memory": ("megatron/utils.py", "megatron/training/utils.py"),
}
#: The moment a ``[date time]`` prefix renders.
WHEN = datetime.datetime(2024, 5, 6, 7, 8, 9)


class _Clock:
    """``datetime`` for the renderer: ``now()`` is :data:`WHEN`."""

    datetime = type("datetime", (), {"now": staticmethod(lambda *a: WHEN)})


def git(repo: Path, *args: str) -> str:
    """Output of a git command in ``repo``."""
    return subprocess.run(
        ["git", "--git-dir", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def history(repo: Path, path: str) -> list[tuple[str, str]]:
    """(commit, date) of every commit that changed ``path``, oldest first."""
    out = git(repo, "log", "--format=%H %cs", "--", path)
    return [tuple(line.split()) for line in reversed(out.splitlines())]  # type: ignore[misc]


def function(text: str, name: str) -> ast.FunctionDef | None:
    """The top-level function ``name`` of a module's text, if it has one."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def render_iteration(func: ast.FunctionDef) -> dict[str, Any] | None:
    """The iteration line one version of ``training_log`` prints, piece by piece."""
    calls = [
        n
        for n in ast.walk(func)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id in ("print_rank_last", "print_rank_0", "print")
        and n.args
        and isinstance(n.args[0], ast.Name)
        and n.args[0].id == "log_string"
    ]
    if not calls:
        return None
    built = _building(func, calls[0])
    if not built:
        return None
    rendering = Rendering()
    names = _Names(rendering)
    names["__builtins__"] = {"str": str, "int": int, "float": float, "round": round,
                             "max": max, "min": min}  # fmt: skip
    names["datetime"] = _Clock
    pieces = []
    for value, loop_vars in built:
        for var in loop_vars:
            names[var] = "lm loss" if var in ("key", "name", "loss_name") else Probe(var, rendering)
        before = dict(rendering.values)
        try:
            text = str(eval(compile(ast.Expression(value), "<piece>", "eval"), names))
        except Exception:  # noqa: BLE001 - a piece this renderer cannot evaluate: left out
            continue
        if not any(c in text for c in ":=|"):
            continue  # a helper's own string (MoE losses, RL metrics): its text is not known
        read = {k: v for k, v in rendering.values.items() if k not in before}
        pieces.append({"text": text, "values": read})
    line = "".join(p["text"] for p in pieces)
    return {"line": line, "pieces": pieces} if "iteration" in line else None


def render_memory(func: ast.FunctionDef) -> str | None:
    """The line one version of ``report_memory`` prints, run with stubbed torch."""
    printed: list[str] = []
    namespace: dict[str, Any] = {
        "__builtins__": {
            "print": lambda *a, **k: printed.append(" ".join(map(str, a))),
            "str": str,
            "round": round,
            "format": format,
        },  # fmt: skip
        "torch": Stub("torch"),
        "mpu": Stub("mpu"),
        "get_accelerator": Stub("get_accelerator"),
        "parallel_state": Stub("parallel_state"),
        "print_rank_0": lambda s: printed.append(str(s)),
    }
    func.decorator_list = []
    try:
        exec(
            compile(ast.Module(body=[func], type_ignores=[]), "<report_memory>", "exec"), namespace
        )
        namespace["report_memory"]("(after 10 iterations)")
    except Exception:  # noqa: BLE001 - a version this renderer cannot run: left out
        return None
    return printed[0] if printed else None


def walk(name: str, repo: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The distinct iteration and memory forms of one repository's history."""
    forms: dict[str, dict[str, dict[str, Any]]] = {"training_log": {}, "report_memory": {}}
    for fn, paths in PATHS.items():
        for path in paths:
            seen: dict[str, str] = {}  # function source -> its form's key
            for commit, date in history(repo, path):
                try:
                    text = git(repo, "show", f"{commit}:{path}")
                except subprocess.CalledProcessError:
                    continue  # the commit removed the file
                node = function(text, fn)
                if node is None:
                    continue
                source = ast.unparse(node)
                if source not in seen:
                    rendered = (
                        render_iteration(node) if fn == "training_log" else render_memory(node)
                    )
                    if rendered is None:
                        seen[source] = ""
                        continue
                    key = json.dumps(rendered, sort_keys=True)
                    seen[source] = key
                    forms[fn].setdefault(
                        key,
                        {
                            "repo": name, "path": path, "first_commit": commit,
                            "first_date": date, "commits": 0,
                            **(rendered if isinstance(rendered, dict) else {"line": rendered}),
                        },
                    )  # fmt: skip
                key = seen[source]
                if key:
                    forms[fn][key]["commits"] += 1
                    forms[fn][key]["last_commit"], forms[fn][key]["last_date"] = commit, date
    return list(forms["training_log"].values()), list(forms["report_memory"].values())


def main(argv: list[str] | None = None) -> int:
    """Walk each repository's history and write the two oracle files."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", action="append", required=True, metavar="OWNER/NAME=GITDIR")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    iterations: list[dict[str, Any]] = []
    memories: list[dict[str, Any]] = []
    for spec in args.repo:
        name, _, where = spec.partition("=")
        it, mem = walk(name, Path(where))
        iterations += it
        memories += mem
        print(f"{name}: {len(it)} iteration forms, {len(mem)} memory forms", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    note = "rendered from each distinct version of the function; commits counts the commits "
    note += "of the path that print the form"
    for kind, found in (("iteration", iterations), ("memory", memories)):
        data = {"kind": kind, "generated_by": "scripts/megatron_formats.py", "note": note,
                "forms": found}  # fmt: skip
        (args.out / f"{kind}.json").write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
