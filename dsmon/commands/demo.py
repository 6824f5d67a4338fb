"""``dsmon demo``: import the bundled real DeepSpeed run, print its summary, open the dashboard.

The bundled run (``dsmon/data/demo/``) is unmodified output of DeepSpeed 0.19.8: ZeRO-2,
two ranks, 30 steps with wall-clock breakdown and the flops profiler. It ships inside the
package so a plain ``pip install`` is enough to see what dsmon makes of a real run.
:func:`load_demo` is the reusable part (the dashboard starts from it too).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from dsmon.commands import dashboard
from dsmon.commands.import_ import import_and_summarise
from dsmon.store import open_store

#: Where ``dsmon demo`` puts its store unless told otherwise.
DEFAULT_DEMO_STORE = "dsmon-demo.sqlite"
#: The run name the demo is stored under.
DEMO_RUN = "demo"


def demo_dir() -> Path:
    """The folder of the bundled run inside the installed package."""
    return Path(str(files("dsmon") / "data" / "demo"))


@dataclass(frozen=True, slots=True)
class DemoResult:
    """Where the demo run was stored, under which name, and its printed report."""

    store_url: str
    run: str
    report: str


def load_demo(store_url: str = DEFAULT_DEMO_STORE) -> DemoResult:
    """Import the bundled run into the store at ``store_url`` (idempotent) and summarise it."""
    with open_store(store_url) as store:
        reports = import_and_summarise(store, [demo_dir()], DEMO_RUN)
    return DemoResult(store_url, DEMO_RUN, reports[0])


def register(subparsers: Any) -> None:
    """Add the ``demo`` command."""
    p = subparsers.add_parser(
        "demo",
        help="import the bundled real DeepSpeed run, print its summary and open the dashboard",
        description="Import the bundled DeepSpeed 0.19.8 ZeRO-2 run into a store, print "
        "its summary and serve the dashboard on it (--summary-only: just the summary).",
    )
    p.add_argument(
        "--store", default=DEFAULT_DEMO_STORE, help=f"store path (default: ./{DEFAULT_DEMO_STORE})"
    )
    p.add_argument(
        "--summary-only", action="store_true", help="print the summary, start no dashboard"
    )
    dashboard.add_server_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Import the demo run, print the report, then serve the dashboard on it."""
    result = load_demo(args.store)
    print(f"Store       {result.store_url}")
    print(result.report)
    if args.summary_only:
        return 0
    return dashboard.start(
        result.store_url, args.port, args.address, args.refresh, not args.no_browser
    )
