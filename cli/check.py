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
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli.errors import CommandError
from cli.extras import require_full

if TYPE_CHECKING:  # loaded when the command runs: the health rules need pandas
    from dsmon.health.inputs import HealthInputs

#: Exit status for input that cannot be read (the same as a failing checklist, per issue #5).
UNREADABLE = 2


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


def gather(args: argparse.Namespace) -> tuple[HealthInputs, str]:
    """What to check, from the arguments; input that gives nothing to check exits 2."""
    from dsmon.health import saved_output as saved

    try:
        if args.store:
            configs = [saved.load_config(Path(n)) for n in args.paths if saved.is_config(Path(n))]
            if len(configs) != len(args.paths):
                raise CommandError("check: with --store, only ds_config files may be given", 2)
            config = configs[0] if configs else None
            return saved.inputs_from_store_url(args.store, args.run, config)
        if args.run:
            raise CommandError("check: --run needs --store", UNREADABLE)
        if not args.paths:
            raise CommandError(
                "check: nothing to check: give a ds_config.json, a log or a run "
                "folder, or --store and --run",
                UNREADABLE,
            )
        return saved.inputs_from_paths(list(args.paths))
    except saved.UnreadableError as exc:
        raise CommandError(str(exc), UNREADABLE) from None
    except saved.RunNeededError as exc:
        raise CommandError(f"check: --run is needed: {exc}", UNREADABLE) from None


def run(args: argparse.Namespace) -> int:
    """Evaluate the checklist and print it; the exit status follows the worst verdict.

    The run's state (:func:`dsmon.health.run_state.judge`) heads the report: a saved run
    judged as of the end of its record, a stored run a collector delivers against the clock.
    """
    require_full("check")
    from dsmon.health import evaluate
    from dsmon.health.report import exit_code, format_text, subject_line, to_json
    from dsmon.health.run_state import has_run, judge

    inputs, subject = gather(args)
    checklist = evaluate(inputs)
    state = judge(inputs) if has_run(inputs) else None
    if args.format == "json":
        doc = to_json(checklist, inputs, subject)
        if state is not None:
            doc["state"] = {
                "state": state.state.value,
                "detail": state.detail,
                "status": state.status.value,
                "exit_code": state.exit_code,
                "cause": state.cause,
            }
        text = json.dumps(doc, indent=2)
    else:
        header = subject_line(inputs, subject)
        if state is not None:
            header += f"\nRun state: {state.line()}"
        text = format_text(checklist, header, args.verbose)
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # The reader went away (``dsmon check ... | head``): the verdict still stands.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return exit_code(checklist)
