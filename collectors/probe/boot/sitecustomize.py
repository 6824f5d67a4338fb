"""Loads dsmon's per-rank probe into every Python process of a job started by ``dsmon run``.

Python imports ``sitecustomize`` at start-up from the first folder on ``sys.path`` that has
one; ``dsmon run`` puts this file's folder first on ``PYTHONPATH``. It does two things and
nothing more:

- when ``DSMON_PROBE_DIR`` is set, it loads the probe package (this folder's parent) under
  the name ``dsmon_probe`` (without putting dsmon's install folder on ``sys.path``, which
  would shadow the training environment's own packages) and installs its import hook;
- it then runs the ``sitecustomize`` this one hides, if the environment has one.

Any failure prints one line to stderr; the job runs on unprobed.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load_probe() -> None:
    if not os.environ.get("DSMON_PROBE_DIR"):
        return
    folder = os.path.dirname(_HERE)
    spec = importlib.util.spec_from_file_location(
        "dsmon_probe", os.path.join(folder, "__init__.py"), submodule_search_locations=[folder]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"no probe package in {folder}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["dsmon_probe"] = module
    spec.loader.exec_module(module)
    module.install()


def _chain() -> None:
    """Run the next ``sitecustomize`` on ``sys.path``, the one this file shadows."""
    others = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


try:
    _load_probe()
except Exception as exc:  # noqa: BLE001 - the job must run even if the probe cannot
    print(f"dsmon probe: not loaded: {type(exc).__name__}: {exc}", file=sys.stderr)
try:
    _chain()
except Exception as exc:  # noqa: BLE001 - as Python itself reports a failing sitecustomize
    print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback: {exc}", file=sys.stderr)
