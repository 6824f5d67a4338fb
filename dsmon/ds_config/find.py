"""Which file a run's DeepSpeed config is, whatever its name: from the launch command or by content.

At DeepSpeed's default log level a log holds no config dump, so the checklist judges the file
the job was started with. That file is rarely ``ds_config.json`` beside the log: scripts name
it ``ds_default.json``, ``zero2.json``, ``configs/ds.json``. The launch command names it
(``--deepspeed_config X``, the Hugging Face Trainer's ``--deepspeed X``), and DeepSpeed's
launcher prints that command at its default INFO level (``cmd = ...``, ``spawned with
command: [...]``), as ``dsmon run`` does in its first line. Failing that, a JSON file beside
the log that reads as a DeepSpeed config is taken. Either way the caller says which file it
judged and why, so a wrong guess is seen and overridden (``--ds-config``).
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

#: Options that name the job's ds_config: DeepSpeed's, and the Hugging Face Trainer's
#: ``--deepspeed ds_config.json`` (DeepSpeed's own ``--deepspeed`` is a flag without a value).
CONFIG_OPTIONS = ("--deepspeed_config", "--deepspeed-config", "--deepspeed")
#: Bytes of a log's start read for its launch command (the launcher prints it first).
HEAD_BYTES = 1 << 18
#: Top-level keys that make a JSON object a DeepSpeed config (one of them suffices).
CONFIG_KEYS = frozenset(
    {
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "zero_optimization",
        "fp16",
        "bf16",
        "steps_per_print",
        "wall_clock_breakdown",
        "gradient_clipping",
    }
)
#: The launch lines that hold a command: ``dsmon run``'s first line, DeepSpeed's runner
#: (``cmd = ...``) and launcher (``spawned with command: [...]``).
_COMMAND = re.compile(r"(?:dsmon run starts the job: |\bcmd = )(?P<cmd>.+)$")
_SPAWNED = re.compile(r"spawned with command: (?P<argv>\[.*\])\s*$")


def config_in(cmd: Sequence[str]) -> str | None:
    """The ds_config file a command line gives the job (``--deepspeed_config X``...)."""
    for i, arg in enumerate(cmd):
        option, eq, value = arg.partition("=")
        if option not in CONFIG_OPTIONS:
            continue
        if not eq:
            value = cmd[i + 1] if i + 1 < len(cmd) else ""
        if option == "--deepspeed" and not value.endswith(".json"):
            continue  # DeepSpeed's flag, followed by the next option or a script's argument
        if value and not value.startswith("-"):
            return value
    return None


def named_in_log(lines: Iterable[str]) -> str | None:
    """The config file the first launch command in ``lines`` names, as written there."""
    for line in lines:
        argv: list[str] | None = None
        if m := _SPAWNED.search(line):
            try:
                found = ast.literal_eval(m["argv"])
            except (ValueError, SyntaxError):
                continue
            argv = [str(a) for a in found] if isinstance(found, list) else None
        elif m := _COMMAND.search(line):
            try:
                argv = shlex.split(m["cmd"])
            except ValueError:
                continue
        name = config_in(argv) if argv else None
        if name:
            return name
    return None


def looks_like_config(path: Path) -> int:
    """How many of :data:`CONFIG_KEYS` a JSON file's top level holds (0: not a config)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return 0
    return len(CONFIG_KEYS.intersection(data)) if isinstance(data, dict) else 0


class Found(NamedTuple):
    """A config file and how it was found (said to the user as is)."""

    path: Path
    how: str


def find_config(log: Path, roots: Sequence[Path] = ()) -> Found | None:
    """The DeepSpeed config of the run whose log is ``log``, or None.

    The file the log's launch command names, looked for in the log's folder and ``roots``
    (the command's relative path is the job's working folder's); else the JSON file beside
    the log that holds the most DeepSpeed keys (ties: by name).
    """
    folders = [log.parent, *roots]
    try:
        with log.open("r", encoding="utf-8", errors="replace") as f:
            head = f.read(HEAD_BYTES).splitlines()
    except OSError:
        head = []
    named = named_in_log(head)
    if named:
        for folder in folders:
            path = Path(named) if Path(named).is_absolute() else folder / named
            if path.is_file():
                return Found(path, f"named by the launch command in {log.name}")
    scored = sorted(
        ((looks_like_config(p), p) for p in sorted(log.parent.glob("*.json"))),
        key=lambda sp: -sp[0],
    )
    if scored and scored[0][0] > 0:
        return Found(
            scored[0][1], f"the JSON file beside {log.name} that reads as a DeepSpeed config"
        )
    return None
