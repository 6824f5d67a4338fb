"""The checklist's inputs from what ``dsmon check`` is given: files, run folders, a stored run.

A ds_config file alone, saved output of a run (logs, a run folder with its
``ds_config.json``), or one run of a store. An input that cannot be read, is not a ds_config
at all, or gives nothing to check (no such path, a folder with no DeepSpeed config or log, a
binary file, a file with no DeepSpeed output) is an :class:`UnreadableError` whose message
is the one line to show, never an empty checklist that would "pass": a mistyped path must
not exit 0.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from dsmon.ds_config.effective import ConfigFileError, ConfigView, config_from_text
from dsmon.health.gather import inputs_from_records, inputs_from_store
from dsmon.health.inputs import HealthInputs
from dsmon.load.files import read_found
from dsmon.load.kinds import DS_CONFIG, InputError, discover
from dsmon.load.rotated import Carries
from dsmon.model.records import ConfigRecord, Record, Source
from dsmon.parse.base import Diagnostics
from dsmon.parse.run_files import run_name
from dsmon.store.errors import StoreError
from dsmon.store.store import open_store

#: How much of a file is sniffed to tell text from binary.
_SNIFF_BYTES = 8192
#: Share of undecodable characters above which a file is not text.
_MAX_BAD_SHARE = 0.1


class UnreadableError(Exception):
    """An input that gives nothing to check; the message is the line to show."""


class RunNeededError(Exception):
    """A store holding several runs (or none) was given without the run to check."""


def _unreadable(name: str | Path, reason: str) -> UnreadableError:
    """The one-line error of an input that cannot be used."""
    return UnreadableError(f"cannot read {name}: {reason}")


def load_config(path: Path) -> ConfigView:
    """A ds_config file, or an UnreadableError naming the file and what is wrong with it."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise _unreadable(path, exc.strerror or str(exc)) from None
    try:
        return config_from_text(text, str(path))
    except ConfigFileError as exc:
        raise _unreadable(path, str(exc)) from None


def is_config(path: Path) -> bool:
    """A file argument is a config when it is JSON (any name); everything else is a log."""
    return path.is_file() and path.suffix.lower() in {".json", ".hjson"}


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
        raise UnreadableError(str(exc)) from None
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


def inputs_from_paths(names: list[str]) -> tuple[HealthInputs, str]:
    """Inputs from file and folder arguments, and the subject line's name for them.

    A config named on the command line wins over one found beside a log.

    Raises:
        UnreadableError: an argument gives nothing to check.
    """
    paths = [Path(n) for n in names]
    explicit = [load_config(p) for p in paths if is_config(p)]
    records = [r for p in paths if not is_config(p) for r in _path_records(p)]
    config = explicit[0] if explicit else None
    subject = ", ".join(names)
    if not records:
        return HealthInputs(config=config, run=subject), subject
    return inputs_from_records(records, run=subject, config=config), subject


def _pick_run(runs: list[str], wanted: str | None, store: str) -> str:
    """The run to check: the named one, or the store's only run."""
    if wanted is not None:
        if wanted not in runs:
            raise _unreadable(
                f"run {wanted}", f"not in store {store} (runs: {', '.join(runs) or 'none'})"
            )
        return wanted
    if len(runs) != 1:
        raise RunNeededError(f"store {store} holds {len(runs)} runs ({', '.join(runs[:10])})")
    return runs[0]


def inputs_from_store_url(
    url: str, run: str | None, config: ConfigView | None
) -> tuple[HealthInputs, str]:
    """Inputs for one run of the store at ``url``.

    A run a collector delivered is judged against the clock (it may still be going: a stall
    is the absence of new records); an imported one as of the end of its record.

    Raises:
        UnreadableError: the store cannot be opened, or has no run ``run``.
        RunNeededError: ``run`` is None and the store does not hold exactly one run.
    """
    try:
        store = open_store(url, create=False)
    except StoreError as exc:
        raise _unreadable(url, str(exc)) from None
    try:
        infos = {r.name: r for r in store.runs()}
        name = _pick_run(list(infos), run, url)
        now = datetime.now() if infos[name].received_at is not None else None
        return inputs_from_store(store, name, config=config, now=now), f"run {name}"
    finally:
        store.close()
