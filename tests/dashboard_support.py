"""A store for the dashboard tests: real corpus runs plus GPU samples built here.

The DeepSpeed runs are the unmodified corpus logs under tests/data/ (DeepSpeed 0.19.8, CPU,
2 ranks; each folder's README says where it came from). The corpus has no NVML output (the
collectors issue provides a fake NVML), so GPU samples are made here with chosen values and
written through the store API, as the dashboard would receive them.
"""

from __future__ import annotations

import atexit
import base64
import functools
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from locations import DATA, ROOT
from streamlit.components.v2 import manifest_scanner
from streamlit.testing.v1 import AppTest, local_script_runner

from dsmon.load.files import import_paths, read_found
from dsmon.load.kinds import discover
from dsmon.model.records import GpuSampleRecord, Record, Source
from dsmon.parse.base import Diagnostics
from dsmon.store.store import open_store

# Every AppTest run makes Streamlit read the metadata of every installed package in search of
# components (about 30 ms each, hundreds of runs); the packages do not change during the tests.
manifest_scanner.scan_component_manifests = functools.cache(  # type: ignore[assignment]
    manifest_scanner.scan_component_manifests
)


def _wait_for_the_script(runner: local_script_runner.LocalScriptRunner, timeout: float = 3) -> None:
    """Wait for an AppTest run by joining its script thread, not by polling every millisecond.

    Streamlit's own wait (``require_widgets_deltas``) wakes every millisecond to look through
    the runner's events: about a fourteenth of the app tests' CPU, taken from the script it
    waits for (the same process, one interpreter lock). The thread ends after the run's end is
    announced. A script that overruns is stopped and reported as Streamlit reports it.
    """
    runner._script_thread.join(timeout)  # started by LocalScriptRunner.run before it waits
    if not runner.script_stopped():
        runner.request_stop()
        runner.join()
        raise RuntimeError(f"AppTest script run timed out after {timeout}(s)")


local_script_runner.require_widgets_deltas = _wait_for_the_script
#: Run name -> corpus folder under tests/data/.
RUNS = {
    "z2": "z2",
    "comms_logger": "comms_logger",
    "comms_logger_verbose": "comms_logger_verbose",
    "flops_detailed_stdout": "flops_detailed_stdout",
    "grad_accum": "grad_accum",
    "fp16_zero2": "fp16_zero2",
    "zero3_coordinator": "zero3_coordinator_v0100",
}
GPU_RUN = "z2"
GIB = 1024**3
T0 = pd.Timestamp("2026-11-29T14:11:01")
#: (node, gpu_index, NVML name, util %, power W): n1/gpu1 is an H100 in an A100 run, and
#: n0/gpu1 runs 40 points below the others.
GPUS = (
    ("n0", 0, "NVIDIA A100-SXM4-80GB", 95.0, 300.0),
    ("n0", 1, "NVIDIA A100-SXM4-80GB", 55.0, 200.0),
    ("n1", 0, "NVIDIA A100-SXM4-80GB", 95.0, 310.0),
    ("n1", 1, "NVIDIA H100 80GB HBM3", 95.0, 500.0),
)
GPU_SECONDS = 10


def gpu_samples(run: str = GPU_RUN, seconds: int = GPU_SECONDS) -> list[GpuSampleRecord]:
    """One sample per GPU and second; every 5th second n0/gpu0 reports SW power cap (0x4)."""
    out = []
    for sec in range(seconds):
        ts = (T0 + pd.Timedelta(seconds=sec)).isoformat(timespec="milliseconds")
        for node, idx, name, util, power in GPUS:
            throttle = 0x4 if (node, idx) == ("n0", 0) and sec % 5 == 0 else 0
            out.append(
                GpuSampleRecord(
                    src=Source(run=run, node=node),
                    ts=ts,
                    gpu_index=idx,
                    name=name,
                    util_gpu_pct=util,
                    mem_used_bytes=40 * GIB,
                    mem_total_bytes=80 * GIB,
                    power_w=power,
                    power_limit_w=400.0 if "A100" in name else 700.0,
                    temperature_c=60.0 + idx,
                    sm_clock_mhz=1410.0,
                    throttle_reasons=throttle,
                )
            )
    return out


@functools.cache
def shared_store() -> str:
    """One store of :data:`RUNS` per test process (the dashboard tests only read it).

    Its folder goes when the process exits.
    """
    root = Path(tempfile.mkdtemp(prefix="dsmon-dash-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return build_store(root / "store.sqlite")


def read_records(folder: str, run: str) -> list[Record]:
    """Every record dsmon reads from a tests/data/ run folder, in file order."""
    diag = Diagnostics()
    out: list[Record] = []
    for found in discover(DATA / folder):
        out.extend(read_found(found, run, diag))
    return out


def build_store(path: Path) -> str:
    """Import every run of :data:`RUNS` and the GPU samples into a new SQLite store."""
    with open_store(path) as store:
        for run, folder in RUNS.items():
            import_paths(store, [DATA / folder], run=run)
        store.add(gpu_samples())
    return str(path)


def app_at(store: str, run: str, page: str | None = None, **query: str) -> AppTest:
    """The dashboard as a browser would show ``?run=<run>`` on ``pages/<page>.py``.

    A browser opening a page's address runs the app once, on that page; so does this (the
    pages have no custom ``url_path``, so the file name names the page before the first run).
    """
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params["run"] = run
    at.query_params.update(query)
    if page is not None:
        at.switch_page(f"pages/{page}.py")
    at.run()
    return at


def record_uncaught(monkeypatch: Any) -> list[BaseException]:
    """Exceptions the app's scripts raise, fragments included, as they happen.

    ``AppTest.exception`` misses an exception raised inside a fragment (every page body is
    one, see ui/page.py): Streamlit logs it and draws it in the fragment's own container.
    """
    from streamlit.runtime import fragment
    from streamlit.runtime.scriptrunner import exec_code

    seen: list[BaseException] = []
    original = exec_code.handle_user_script_exception

    def record(ex: Exception, on_error: Any) -> None:
        seen.append(ex)
        original(ex, on_error)

    monkeypatch.setattr(fragment, "handle_user_script_exception", record)
    monkeypatch.setattr(exec_code, "handle_user_script_exception", record)
    return seen


def texts(at: AppTest) -> str:
    """All markdown, caption, info and warning text of a rendered page, joined."""
    parts = [
        e.value for kind in ("markdown", "caption", "info", "warning") for e in getattr(at, kind)
    ]
    return "\n".join(str(p) for p in parts)


def figures(at: AppTest) -> dict[str, dict[str, Any]]:
    """The page's plotly figures as JSON, keyed by their title text."""
    out = {}
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)  # type: ignore[attr-defined]
        title = spec["layout"].get("title", {}).get("text", "")
        out[title] = spec
    return out


def trace_names(spec: dict[str, Any]) -> list[str]:
    """Names of a figure's traces, in drawing order."""
    return [t.get("name", "") for t in spec["data"]]


def values(data: Any) -> list[Any]:
    """A trace's x or y as a list.

    The dashboard's charts send JSON arrays (``ui/charts.py``); a figure sent as plotly.py
    makes it has base64 typed arrays.
    """
    if isinstance(data, dict) and "bdata" in data:
        arr = np.frombuffer(base64.b64decode(data["bdata"]), dtype=data["dtype"])
        return arr.tolist()
    return list(data)
