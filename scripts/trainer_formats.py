#!/usr/bin/env python3
"""The Hugging Face Trainer's log dicts as each transformers release prints them.

Most DeepSpeed jobs are driven by ``transformers.Trainer``, whose own console output is the only
place their loss is printed: every ``logging_steps`` its ``ProgressCallback.on_log`` writes the
log dict above the progress bar. How it writes it changed: ``str(logs)`` (4.x), the epoch
rounded to two places (4.46), floats as ``f"{v:.4g}"`` strings (5.x). This script takes
``ProgressCallback.on_log`` from each transformers wheel it is given and runs it on the dicts a
Trainer logs (a training step, an evaluation, the end of training; the Trainer rounds the loss to
four places before), keeping what it wrote.

Output, committed as data (the wheels never are): ``tests/oracle/trainer/log.json``.

Usage::

    pip download --no-deps -d /tmp/tf transformers==4.20.1 transformers==5.18.0 ...
    python scripts/trainer_formats.py /tmp/tf/transformers-*.whl
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "oracle" / "trainer" / "log.json"
#: What a Trainer logs: a training step, an evaluation, the end of training.
LOGS: dict[str, dict[str, Any]] = {
    "train": {"loss": 2.0491, "grad_norm": 1.2345678901, "learning_rate": 0.000196,
              "epoch": 0.28333333333333},
    "eval": {"eval_loss": 1.87654321, "eval_runtime": 12.3456, "eval_samples_per_second": 81.003,
             "eval_steps_per_second": 10.125, "epoch": 1.0},
    "summary": {"train_runtime": 123.4567, "train_samples_per_second": 32.4,
                "train_steps_per_second": 4.05, "total_flos": 1.2345e15,
                "train_loss": 2.3456789012, "epoch": 3.0},
}  # fmt: skip


class _Bar:
    def __init__(self) -> None:
        self.written: list[str] = []

    def write(self, text: str) -> None:
        self.written.append(text)


class _Anything:
    """``args``, ``state`` and ``control`` as ``on_log`` reads them."""

    is_local_process_zero = True
    is_world_process_zero = True


def on_log(wheel: Path) -> Any:
    """``ProgressCallback.on_log`` of one wheel, compiled alone."""
    with zipfile.ZipFile(wheel) as zf:
        text = zf.read("transformers/trainer_callback.py").decode()
    tree = ast.parse(text)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ProgressCallback")
    func = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "on_log")
    namespace: dict[str, Any] = {}
    exec(
        compile(ast.Module(body=[func], type_ignores=[]), "trainer_callback.py", "exec"), namespace
    )
    return namespace["on_log"]


def main(argv: list[str] | None = None) -> int:
    """Run ``on_log`` of every wheel given and write the oracle file."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheels", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    forms: dict[str, dict[str, Any]] = {}
    for wheel in sorted(
        args.wheels, key=lambda p: [int(x) for x in p.name.split("-")[1].split(".")]
    ):
        version = wheel.name.split("-")[1]
        fn = on_log(wheel)
        for case, logs in LOGS.items():
            bar = _Bar()
            me = type("ProgressCallback", (), {"training_bar": bar, "max_str_len": 100})()
            fn(me, _Anything(), _Anything(), _Anything(), logs=dict(logs))
            (line,) = bar.written
            form = forms.setdefault(
                f"{case}:{line}", {"case": case, "line": line, "logs": logs, "releases": []}
            )
            form["releases"].append(version)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    data = {"kind": "trainer_log", "generated_by": "scripts/trainer_formats.py",
            "source": "transformers/trainer_callback.py:ProgressCallback.on_log",
            "forms": list(forms.values())}  # fmt: skip
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{args.out}: {len(forms)} forms", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
