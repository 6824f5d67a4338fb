"""``dsmon check [CONFIG.json | LOG | RUN_FOLDER ...] [--store PATH --run NAME]``: the checklist.

Prints the health checklist for a ds_config alone, for saved output of a run (logs, a run
folder with its ds_config.json), or for a run in a store, in the terminal or as JSON for CI.
Exit status (issue #5): 0 when no rule warns or fails (rules that cannot tell or do not apply
to the run count for neither), 1 on warnings, 2 on failures, and 2 with one line
``dsmon: cannot read FILE: reason`` when an input is unreadable, invalid JSON, not a
ds_config at all, or gives nothing to check (no such path, a folder with no DeepSpeed config
or log, a binary file, a file with no DeepSpeed output).
"""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    """Add the ``check`` command."""
    p = subparsers.add_parser(
        "check",
        help="print the health checklist for a ds_config, saved run output or a stored run",
        description="Check a DeepSpeed config and/or a run against the health checklist. "
        "Exit 0 when all pass, 1 on warnings, 2 on failures or unreadable input.",
    )
    p.add_argument(
        "paths",
        nargs="*",
        metavar="CONFIG|LOG|RUN_FOLDER",
        help="a ds_config.json, a DeepSpeed log, or a run folder",
    )
    p.add_argument("--store", help="a dsmon store (path or URL) holding the run")
    p.add_argument("--run", help="the run to check in --store (default: its only run)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    p.add_argument(
        "--json", action="store_const", const="json", dest="format", help="same as --format json"
    )
    p.add_argument(
        "-v", "--verbose", action="store_true", help="show evidence for passing rules too"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Evaluate the checklist and print it; the exit status follows the worst verdict."""
    from dsmon.commands import _check_impl  # the health rules need pandas: load them now

    return _check_impl.run(args)
