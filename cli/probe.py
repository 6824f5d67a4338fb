"""``dsmon probe DIR``: the per-rank probe copied out, for a training environment without dsmon.

A job started without ``dsmon run`` (a training container, a scheduler's script) turns the
probe on with two environment variables; this command copies the probe into a folder (a
volume shared with the training container, for example) and prints them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cli.errors import CommandError


def register(subparsers: Any) -> None:
    """Add the ``probe`` command."""
    e = subparsers.add_parser(
        "probe",
        help="copy the per-rank probe into a folder, for a training environment without dsmon",
        description="Copy the per-rank probe that 'dsmon run' loads into a folder (a volume "
        "shared with a training container, for example) and print the two environment "
        "variables that turn it on in a job started without 'dsmon run'.",
    )
    e.add_argument("folder", metavar="DIR", help="where to copy the probe (created)")
    e.add_argument(
        "--probe-dir",
        default="/logs/probe",
        metavar="DIR",
        help="the folder the ranks will write to, for the printed DSMON_PROBE_DIR "
        "(default /logs/probe)",
    )
    e.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``dsmon probe DIR``: the probe's files in ``DIR``, and how to turn it on."""
    from collectors.job import PROBE_DIR_ENV, copy_probe

    dest = Path(args.folder)
    try:
        boot = copy_probe(dest)
    except OSError as exc:
        raise CommandError(f"probe: cannot copy to {dest}: {exc.strerror or exc}") from None
    print(f"PYTHONPATH={boot}")
    print(f"{PROBE_DIR_ENV}={args.probe_dir}")
    return 0
