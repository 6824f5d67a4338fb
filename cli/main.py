"""The ``dsmon`` command line: one argparse parser, one module of ``cli/`` per command.

Each command module has ``register(subparsers)``, which adds its parser and sets
``func=run`` where ``run(args) -> int`` returns the exit status. Building the parser imports
only those modules, which import the work of their command when it runs: ``dsmon collect``
on a node never loads pandas, Streamlit or the server stack, which a node's install
(``pip install 'dsmon[collector]'``) does not have. Failures the user can fix print one line,
``dsmon: <what>: <reason>``, and exit non-zero; so does a command whose packages the install
left out (:mod:`cli.extras`).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from cli import (
    check,
    collect,
    dashboard,
    demo,
    export,
    import_,
    parse,
    probe,
    run,
    serve,
    watch,
)
from cli.errors import CommandError
from cli.extras import missing_package_line
from dsmon import __version__

#: Every command's ``register``, in the order ``dsmon --help`` lists them.
COMMANDS: tuple[Callable[[Any], None], ...] = (
    check.register,
    dashboard.register,
    demo.register,
    export.register,
    import_.register,
    parse.register,
    serve.register,
    collect.register,
    watch.register,
    run.register,
    probe.register,
)


def build_parser() -> argparse.ArgumentParser:
    """The full parser with every command registered."""
    parser = argparse.ArgumentParser(
        prog="dsmon", description="Live monitor for DeepSpeed training runs."
    )
    parser.add_argument("--version", action="version", version=f"dsmon {__version__}")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND", dest="subcommand")
    for register in COMMANDS:
        register(sub)
    return parser


def _user_error(exc: Exception) -> tuple[str, int] | None:
    """The line and status of a failure the user can fix, raised below the command line.

    The core's own kinds (a file that cannot be read, a store that cannot be opened) are
    looked up only once something failed, so that building the parser loads no store.
    """
    try:
        from dsmon.load.kinds import InputError
        from dsmon.store.errors import StoreError
    except ImportError:  # the core's modules do not load here: neither was raised
        return None
    if isinstance(exc, (InputError, StoreError)):
        return str(exc), 1
    return None


def _command_parser(parser: argparse.ArgumentParser, name: str | None) -> argparse.ArgumentParser:
    """The parser of command ``name`` (the top level's when there is none)."""
    for action in parser._actions:  # argparse keeps its subcommands there, and nowhere public
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            command: argparse.ArgumentParser = action.choices[name]
            return command
    return parser


def unknown_arguments(parser: argparse.ArgumentParser, extras: Sequence[str]) -> str:
    """``unrecognized arguments: --form (did you mean --format?)``, for ``parser``'s error."""
    options = [o for a in parser._actions for o in a.option_strings]
    hints = []
    for arg in extras:
        if arg.startswith("-"):
            close = difflib.get_close_matches(arg.split("=", 1)[0], options, n=1, cutoff=0.75)
            hints += [f"did you mean {close[0]}?"] if close else []
    text = f"unrecognized arguments: {' '.join(extras)}"
    return f"{text} ({'; '.join(hints)})" if hints else text


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``dsmon`` command; returns the exit status (the console script exits with it).

    An argument no option takes is reported by the command's own parser, with its usage and
    the option most like it, not with the top level's usage.
    """
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        command = _command_parser(parser, args.subcommand)
        command.error(unknown_arguments(command, extras))  # exits with status 2
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(func(args))
    except CommandError as exc:
        print(f"dsmon: {exc}", file=sys.stderr)
        return exc.code
    except ModuleNotFoundError as exc:
        line = missing_package_line(args.subcommand, exc)
        if line is None:
            raise
        print(f"dsmon: {line}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("dsmon: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        known = _user_error(exc)
        if known is None:
            raise
        print(f"dsmon: {known[0]}", file=sys.stderr)
        return known[1]


if __name__ == "__main__":
    sys.exit(main())
