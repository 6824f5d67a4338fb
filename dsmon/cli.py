"""The ``dsmon`` command line: one argparse parser whose subcommands are found, not listed.

Every module in ``dsmon/commands/`` that has a ``register(subparsers)`` function adds a
command, and so does every entry point of the group ``dsmon.commands``: that is how
``collectors/`` adds ``collect`` and ``watch`` without the core importing node-side code.
Failures the user can fix print one line, ``dsmon: <what>: <reason>``, and exit non-zero.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import entry_points
from typing import Any

from dsmon import __version__, commands
from dsmon.commands import CommandError
from dsmon.load.files import InputError
from dsmon.store.errors import StoreError

#: Entry-point group through which other packages add subcommands.
ENTRY_POINT_GROUP = "dsmon.commands"

Register = Callable[[Any], None]


def _builtin_registrars() -> Iterator[tuple[str, Register]]:
    """``register`` of every module in ``dsmon/commands/``, in name order.

    Modules named ``_*`` hold a command's implementation and are imported only when that
    command runs: building the parser must not load pandas for ``dsmon collect``.
    """
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        register = getattr(module, "register", None)
        if callable(register):
            yield info.name, register


def _plugin_registrars() -> Iterator[tuple[str, Register]]:
    """``register`` of every ``dsmon.commands`` entry point (a module or the function itself).

    A plugin that fails to load is reported on stderr and skipped: a broken optional
    package must not take the core commands down with it.
    """
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as exc:  # noqa: BLE001 - any import error of a plugin
            print(f"dsmon: command plugin {ep.name}: cannot load: {exc}", file=sys.stderr)
            continue
        register = getattr(obj, "register", obj)
        if callable(register):
            yield ep.name, register


def build_parser() -> argparse.ArgumentParser:
    """The full parser with every built-in and plugin command registered."""
    parser = argparse.ArgumentParser(
        prog="dsmon", description="Live monitor for DeepSpeed training runs."
    )
    parser.add_argument("--version", action="version", version=f"dsmon {__version__}")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name, register in (*_builtin_registrars(), *_plugin_registrars()):
        try:
            register(sub)
        except argparse.ArgumentError as exc:
            print(f"dsmon: command {name}: {exc}", file=sys.stderr)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``dsmon`` command; returns the exit status (the console script exits with it)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(func(args))
    except (CommandError, InputError, StoreError) as exc:
        print(f"dsmon: {exc}", file=sys.stderr)
        return exc.code if isinstance(exc, CommandError) else 1
    except KeyboardInterrupt:
        print("dsmon: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
