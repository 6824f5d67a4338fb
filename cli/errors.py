"""The one kind of failure a command reports: a line the user can act on, and an exit status.

A command raises :class:`CommandError` for a failure the user can fix (bad input, a port in
use, a package the install left out); :func:`cli.main.main` prints it as the one line
``dsmon: <what>: <reason>`` and exits with its code, so no command prints a traceback for
bad input.
"""

from __future__ import annotations


class CommandError(Exception):
    """A failure reported as one line ``dsmon: <message>`` and exit status ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def nothing_read(command: str, names: list[str], lines: int) -> CommandError:
    """The error of a command that read its inputs and found no DeepSpeed output in them.

    ``dsmon import notds.log`` once exited 0 with "0 records": a typo in a path, or the
    wrong file, looked like success. The line says what dsmon reads instead.
    """
    what = ", ".join(names)
    return CommandError(
        f"{command}: no DeepSpeed output in {what} ({lines} line(s) read, none of them "
        "DeepSpeed's): dsmon reads DeepSpeed's training logs (with \"wall_clock_breakdown\": "
        "true for step timers), flops-profiler output, csv_monitor files, autotuner results, "
        "ds_config.json and the JSON lines of dsmon parse/export"
    )
