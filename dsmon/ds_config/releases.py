"""What each DeepSpeed release reads from a ds_config, as its own source says.

Advice is only true for the DeepSpeed that ran: ``OneBitAdam`` is a DeepSpeed optimizer up to
0.19.6 and an ``AssertionError`` at ``deepspeed.initialize`` from 0.19.7; ``log_level`` is read
from 0.19.3 and silently ignored before; ``gradient_clipping`` defaults to 0 up to 0.19.2 and to
1.0 after. ``scripts/ds_config_knowledge.py`` reads every release's source (0.3.1 to 0.19.8) with
``ast`` and writes what it found to ``dsmon/data/ds_config/releases.json``; this module loads
that file once and answers for one version: which keys exist, their defaults, their aliases and
deprecations, which sections refuse unknown keys, which keys the release refuses outright or
ignores in some case, and which optimizer and scheduler names it builds.

A version between two known releases (``0.10.1+abc``, a source build) is judged as the newest
known release not newer than it; a version newer than every known release as the newest one;
one older than every release as the oldest.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

Release = tuple[int, int, int]
#: The file the generator writes (package data of dsmon).
DATA = Path(__file__).resolve().parent.parent / "data" / "ds_config" / "releases.json"


def _release(text: str) -> Release:
    major, minor, patch = (int(x) for x in text.split("."))
    return major, minor, patch


@dataclass(frozen=True, slots=True)
class Span:
    """Releases first..last (inclusive, indexes into :attr:`Knowledge.releases`)."""

    first: int
    last: int

    def holds(self, index: int) -> bool:
        """Whether release ``index`` lies in the span."""
        return self.first <= index <= self.last


@dataclass(frozen=True, slots=True)
class KeyHistory:
    """One dotted key across releases: where it is read, its defaults, alias and deprecation."""

    spans: tuple[Span, ...]
    defaults: tuple[tuple[int, Any], ...] = ()
    aliases: tuple[tuple[int, str | None], ...] = ()
    deprecations: tuple[tuple[int, str | None], ...] = ()


def _changes_at(table: tuple[tuple[int, Any], ...], index: int, none: Any = None) -> Any:
    """The value of a change-point table in force at release ``index``."""
    value = none
    for since, v in table:
        if since <= index:
            value = v
    return value


class Knowledge:
    """The loaded data, with the questions rules ask of it per release."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        self.releases: tuple[Release, ...] = tuple(_release(r) for r in doc["releases"])
        self._index = {text: i for i, text in enumerate(doc["releases"])}
        self.keys: dict[str, KeyHistory] = {
            path: KeyHistory(
                self._spans(entry["in"]),
                self._points(entry.get("default", [])),
                self._points(entry.get("alias_of", [])),
                self._points(entry.get("deprecated", [])),
            )
            for path, entry in doc["keys"].items()
        }
        self._pydantic = {p: self._spans(s["pydantic"]) for p, s in doc["sections"].items()}
        self._strict = {p: self._spans(s["strict"]) for p, s in doc["sections"].items()}
        self._refused = {p: (self._spans(r["in"]), r["message"]) for p, r in doc["refused"].items()}
        self._ignored = {p: (self._spans(r["in"]), r["why"]) for p, r in doc["ignored"].items()}
        self._features = {name: self._spans(r) for name, r in doc["features"].items()}
        self._optimizers = self._points(doc["optimizers"])
        self._schedulers = self._points(doc["schedulers"])
        self._children: dict[tuple[str, int], dict[str, KeyHistory]] = {}

    def _spans(self, ranges: list[list[str]]) -> tuple[Span, ...]:
        return tuple(Span(self._index[a], self._index[b]) for a, b in ranges)

    def _points(self, points: list[list[Any]]) -> tuple[tuple[int, Any], ...]:
        return tuple((self._index[since], value) for since, value in points)

    # --- releases ---------------------------------------------------------------------------
    @property
    def newest(self) -> Release:
        """The newest release the data knows."""
        return self.releases[-1]

    def at(self, version: Release | None) -> int:
        """The index of the release a version is judged as (None: the newest)."""
        if version is None:
            return len(self.releases) - 1
        return max(bisect.bisect_right(self.releases, tuple(version)) - 1, 0)

    def judged_as(self, version: Release | None) -> Release:
        """The known release a version is judged as."""
        return self.releases[self.at(version)]

    def text(self, index: int) -> str:
        """A release's number as DeepSpeed prints it."""
        return ".".join(map(str, self.releases[index]))

    def spans_text(self, spans: tuple[Span, ...]) -> str:
        """``0.3.1-0.19.6`` (or several such ranges) for a message."""
        return ", ".join(
            self.text(s.first) if s.first == s.last else f"{self.text(s.first)}-{self.text(s.last)}"
            for s in spans
        )

    # --- keys -------------------------------------------------------------------------------
    def exists(self, path: str, version: Release | None) -> bool:
        """Whether the release reads this dotted key (or section) at all."""
        history = self.keys.get(path)
        index = self.at(version)
        return history is not None and any(s.holds(index) for s in history.spans)

    def ever(self, path: str) -> bool:
        """Whether any known release reads this dotted key."""
        return path in self.keys

    def default(self, path: str, version: Release | None) -> Any:
        """The release's default for a key; for a key it does not read, the nearest release's."""
        history = self.keys.get(path)
        if history is None or not history.defaults:
            return None
        index = self.at(version)
        if not any(s.holds(index) for s in history.spans):
            near = min((abs(i - index), i) for s in history.spans for i in (s.first, s.last))[1]
            index = near
        if index < history.defaults[0][0]:
            return history.defaults[0][1]
        return _changes_at(history.defaults, index)

    def alias_of(self, path: str, version: Release | None) -> str | None:
        """The field a key is an alias of in this release (``stage3_prefetch_bucket_size``)."""
        history = self.keys.get(path)
        return _changes_at(history.aliases, self.at(version)) if history else None

    def deprecated_for(self, path: str, version: Release | None) -> str | None:
        """What replaces a key the release reads but calls deprecated ('' when nothing does)."""
        history = self.keys.get(path)
        if history is None or not self.exists(path, version):
            return None
        return _changes_at(history.deprecations, self.at(version))

    def children(self, section: str, version: Release | None) -> dict[str, KeyHistory]:
        """The keys read directly under a section ('' = the top level) by this release."""
        index = self.at(version)
        cached = self._children.get((section, index))
        if cached is None:
            prefix = f"{section}." if section else ""
            cached = {
                path[len(prefix) :]: h
                for path, h in self.keys.items()
                if path.startswith(prefix)
                and "." not in path[len(prefix) :]
                and any(s.holds(index) for s in h.spans)
            }
            self._children[(section, index)] = cached
        return cached

    def ever_children(self, section: str) -> set[str]:
        """The keys any release reads directly under a section."""
        prefix = f"{section}." if section else ""
        return {
            p[len(prefix) :]
            for p in self.keys
            if p.startswith(prefix) and "." not in p[len(prefix) :]
        }

    def first_last(self, path: str) -> tuple[Release, Release] | None:
        """The first and the last release that read a key."""
        history = self.keys.get(path)
        if history is None:
            return None
        return self.releases[history.spans[0].first], self.releases[history.spans[-1].last]

    # --- sections and special cases ---------------------------------------------------------
    def pydantic(self, section: str, version: Release | None) -> bool:
        """Whether the release models this section with pydantic (its coercion rules apply)."""
        index = self.at(version)
        return any(s.holds(index) for s in self._pydantic.get(section, ()))

    def strict(self, section: str, version: Release | None) -> bool:
        """Whether an unknown key in this section makes ``deepspeed.initialize`` fail."""
        index = self.at(version)
        return any(s.holds(index) for s in self._strict.get(section, ()))

    def strict_since(self, section: str) -> Release | None:
        """The first release whose model of the section refuses unknown keys."""
        spans = self._strict.get(section)
        return self.releases[spans[0].first] if spans else None

    def refused(self, path: str, version: Release | None) -> str | None:
        """DeepSpeed's own error message when the release refuses a key, else None."""
        found = self._refused.get(path)
        if found is None or not any(s.holds(self.at(version)) for s in found[0]):
            return None
        return str(found[1])

    def ignored(self, path: str, version: Release | None) -> str | None:
        """Why the release reads a key but lets it change nothing (see the generator)."""
        found = self._ignored.get(path)
        if found is None or not any(s.holds(self.at(version)) for s in found[0]):
            return None
        return str(found[1])

    def ignored_since(self, path: str) -> Release | None:
        """The first release that ignores a key (as :meth:`ignored` says)."""
        found = self._ignored.get(path)
        return self.releases[found[0][0].first] if found else None

    def feature(self, name: str, version: Release | None) -> bool:
        """Whether the release has a feature the generator looks for (``engine.compile``)."""
        return any(s.holds(self.at(version)) for s in self._features.get(name, ()))

    # --- names ------------------------------------------------------------------------------
    def optimizers(self, version: Release | None) -> tuple[str, ...]:
        """The optimizer types the release builds itself (lower case; DeepSpeed lower-cases)."""
        return tuple(_changes_at(self._optimizers, self.at(version), ()))

    def schedulers(self, version: Release | None) -> tuple[str, ...]:
        """The scheduler classes of the release's ``runtime/lr_schedules.py``."""
        return tuple(_changes_at(self._schedulers, self.at(version), ()))

    def optimizer_spans(self, name: str) -> tuple[Span, ...]:
        """The releases that build an optimizer type (lower case)."""
        present = [name in names for _, names in self._expand(self._optimizers)]
        return _spans_of(present)

    def scheduler_spans(self, name: str) -> tuple[Span, ...]:
        """The releases that build a scheduler class."""
        present = [name in names for _, names in self._expand(self._schedulers)]
        return _spans_of(present)

    def _expand(self, table: tuple[tuple[int, Any], ...]) -> list[tuple[int, Any]]:
        return [(i, _changes_at(table, i, ())) for i in range(len(self.releases))]


def _spans_of(present: list[bool]) -> tuple[Span, ...]:
    out: list[Span] = []
    start: int | None = None
    for i, here in enumerate([*present, False]):
        if here and start is None:
            start = i
        elif not here and start is not None:
            out.append(Span(start, i - 1))
            start = None
    return tuple(out)


@cache
def knowledge() -> Knowledge:
    """The data, loaded on first use."""
    return Knowledge(json.loads(DATA.read_text(encoding="utf-8")))
