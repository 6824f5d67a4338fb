"""The work of ``dsmon check`` (see :mod:`dsmon.commands.check`), loaded only when it runs."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime
from pathlib import Path

from dsmon.commands import CommandError
from dsmon.health import ConfigView, HealthInputs, evaluate
from dsmon.health.config_view import ConfigFileError, config_from_text
from dsmon.health.gather import inputs_from_records, inputs_from_store
from dsmon.health.report import exit_code, format_text, subject_line, to_json
from dsmon.load.files import DS_CONFIG, InputError, discover, read_found
from dsmon.load.rotated import Carries
from dsmon.model.records import ConfigRecord, Record, Source
from dsmon.parse.base import Diagnostics
from dsmon.parse.run_files import run_name
from dsmon.store.errors import StoreError
from dsmon.store.store import open_store

#: Exit status for input that cannot be read (the same as a failing checklist, per issue #5).
UNREADABLE = 2


def _unreadable(name: str | Path, reason: str) -> CommandError:
    """The one-line error of an input that cannot be used."""
    return CommandError(f"cannot read {name}: {reason}", UNREADABLE)


def load_config(path: Path) -> ConfigView:
    """A ds_config file, or a CommandError naming the file and what is wrong with it."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise _unreadable(path, exc.strerror or str(exc)) from None
    try:
        return config_from_text(text, str(path))
    except ConfigFileError as exc:
        raise _unreadable(path, str(exc)) from None


def _is_config(path: Path) -> bool:
    """A file argument is a config when it is JSON (any name); everything else is a log."""
    return path.is_file() and path.suffix.lower() in {".json", ".hjson"}


#: How much of a file is sniffed to tell text from binary.
_SNIFF_BYTES = 8192
#: Share of undecodable characters above which a file is not text.
_MAX_BAD_SHARE = 0.1


def _is_binary(path: Path) -> bool:
    """Whether a file is binary (NUL bytes, or mostly not UTF-8): no DeepSpeed log is."""
    with path.open("rb") as f:
        head = f.read(_SNIFF_BYTES)
    if b"\0" in head:
        return True
    text = head.decode("utf-8", errors="replace")
    return bool(text) and text.count("\ufffd") / len(text) > _MAX_BAD_SHARE


def _path_records(path: Path) -> list[Record]:
    """Records of one log/folder argument, a ds_config file found in a folder among them.

    A config found beside a log is one record among the others, not a config the user
    named: the log's own dump, or the engine's config read by dsmon run's probe, says what
    ran and is preferred to it (as ``dsmon import`` and the dashboard prefer it). An
    argument that yields nothing to check is an error, not an empty checklist: a mistyped
    path, an empty folder or a binary file would otherwise "pass" with exit 0.
    """
    if not path.exists():
        raise _unreadable(path, "No such file or directory")
    try:
        if path.is_file() and _is_binary(path):
            raise _unreadable(path, "not text (a binary file, not a DeepSpeed log or config)")
        found = discover(path)
    except InputError as exc:
        raise CommandError(str(exc), UNREADABLE) from None
    except OSError as exc:
        raise _unreadable(path, exc.strerror or str(exc)) from None
    what = "folder" if path.is_dir() else "file"
    if not found:
        raise _unreadable(path, f"no DeepSpeed config or log found in {what}")
    records: list[Record] = []
    carries: Carries = {}
    for f in found:
        if f.kind == DS_CONFIG:
            view = load_config(f.path)  # an unreadable config is an error, as when named
            src = Source(run=run_name(path), file=str(f.path))
            records.append(ConfigRecord(src=src, origin="file", config=view.raw))
            continue
        try:
            records.extend(read_found(f, run_name(path), Diagnostics(), carries=carries))
        except OSError as exc:
            raise _unreadable(f.path, exc.strerror or str(exc)) from None
    if not records and not any(f.kind == DS_CONFIG for f in found):
        raise _unreadable(path, f"no DeepSpeed output found in {what} (no line dsmon reads)")
    return records


def _from_files(names: list[str]) -> tuple[HealthInputs, str]:
    """Inputs from file and folder arguments: a config named on the command line wins."""
    paths = [Path(n) for n in names]
    explicit = [load_config(p) for p in paths if _is_config(p)]
    records = [r for p in paths if not _is_config(p) for r in _path_records(p)]
    config = _first(explicit)
    subject = ", ".join(names)
    if not records:
        return HealthInputs(config=config, run=subject), subject
    return inputs_from_records(records, run=subject, config=config), subject


def _first(configs: list[ConfigView]) -> ConfigView | None:
    """The first config given, if any (explicit files are listed before found ones)."""
    return configs[0] if configs else None


def _pick_run(runs: list[str], wanted: str | None, store: str) -> str:
    """The run to check: the named one, or the store's only run."""
    if wanted is not None:
        if wanted not in runs:
            raise _unreadable(
                f"run {wanted}", f"not in store {store} (runs: {', '.join(runs) or 'none'})"
            )
        return wanted
    if len(runs) != 1:
        raise CommandError(
            f"check: --run is needed: store {store} holds {len(runs)} runs "
            f"({', '.join(runs[:10])})",
            UNREADABLE,
        )
    return runs[0]


def _from_store(url: str, run: str | None, config: ConfigView | None) -> tuple[HealthInputs, str]:
    """Inputs for one run of a store, judged live (the stall rule needs the clock)."""
    try:
        store = open_store(url)
    except StoreError as exc:
        raise _unreadable(url, str(exc)) from None
    try:
        name = _pick_run([r.name for r in store.runs()], run, url)
        return inputs_from_store(store, name, config=config, now=datetime.now()), f"run {name}"
    finally:
        store.close()


def gather(args: argparse.Namespace) -> tuple[HealthInputs, str]:
    """What to check, from the arguments."""
    if args.store:
        configs = [load_config(Path(n)) for n in args.paths if _is_config(Path(n))]
        if len(configs) != len(args.paths):
            raise CommandError("check: with --store, only ds_config files may be given", 2)
        return _from_store(args.store, args.run, _first(configs))
    if args.run:
        raise CommandError("check: --run needs --store", UNREADABLE)
    if not args.paths:
        raise CommandError(
            "check: nothing to check: give a ds_config.json, a log or a run "
            "folder, or --store and --run",
            UNREADABLE,
        )
    return _from_files(list(args.paths))


def run(args: argparse.Namespace) -> int:
    """Evaluate the checklist and print it; the exit status follows the worst verdict."""
    inputs, subject = gather(args)
    checklist = evaluate(inputs)
    if args.format == "json":
        text = json.dumps(to_json(checklist, inputs, subject), indent=2)
    else:
        text = format_text(checklist, subject_line(inputs, subject), args.verbose)
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # The reader went away (``dsmon check ... | head``): the verdict still stands.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return exit_code(checklist)
