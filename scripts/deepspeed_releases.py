#!/usr/bin/env python3
"""Every DeepSpeed release's source, fetched once from PyPI and kept in a local cache.

dsmon reads what DeepSpeed prints and judges the configs it accepts, and both changed from
release to release. The release sources are the oracle for both: the print code (timers,
the flops profiler, the comms logger, loss-scale messages, the config dump) and the config
classes with their defaults. This script is run by hand (it needs the network); the data
that other scripts derive from the sources is committed, the sources themselves never are.

``pip download deepspeed==X --no-binary :all:`` cannot fetch the early releases: pip builds
each sdist's metadata, and their ``setup.py`` imports torch. So the sdist is taken straight
from PyPI's simple index (PEP 503), checked against the index's sha256, and only the Python
files under ``deepspeed/`` are kept.

Usage::

    python scripts/deepspeed_releases.py list              # every release on PyPI
    python scripts/deepspeed_releases.py fetch 0.3.16 0.19.8
    python scripts/deepspeed_releases.py fetch --all       # about 110 releases, ~400 MB
    python scripts/deepspeed_releases.py path 0.10.0       # where a fetched release lies

Other scripts import :func:`releases` and :func:`source` from here.
"""

from __future__ import annotations

import argparse
import hashlib
import html.parser
import io
import os
import re
import sys
import tarfile
import urllib.request
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

INDEX = "https://pypi.org/simple/deepspeed/"
#: A release's sdist as the index names it: ``deepspeed-0.3.16.tar.gz`` (some are ``.zip``).
_SDIST = re.compile(r"^deepspeed-(\d+\.\d+\.\d+)\.(tar\.gz|zip)$")
#: Where sources are kept unless ``--cache`` or ``$DSMON_DEEPSPEED_RELEASES`` says otherwise.
DEFAULT_CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dsmon" / "deepspeed"
)


class _Links(html.parser.HTMLParser):
    """The ``href`` of every anchor of a PEP 503 page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def version_key(version: str) -> tuple[int, ...]:
    """``0.10.0`` sorts after ``0.9.5``."""
    return tuple(int(p) for p in version.split("."))


def releases(index: str = INDEX) -> dict[str, tuple[str, str]]:
    """Every release with an sdist: version -> (url, sha256), oldest first."""
    with urllib.request.urlopen(index, timeout=60) as resp:
        page = _Links()
        page.feed(resp.read().decode("utf-8"))
    found: dict[str, tuple[str, str]] = {}
    for href in page.hrefs:
        url, _, fragment = href.partition("#")
        m = _SDIST.match(url.rsplit("/", 1)[-1])
        if m and fragment.startswith("sha256="):
            found[m.group(1)] = (url, fragment.removeprefix("sha256="))
    return dict(sorted(found.items(), key=lambda kv: version_key(kv[0])))


def cache_dir(cache: Path | None = None) -> Path:
    """The cache in use: the argument, ``$DSMON_DEEPSPEED_RELEASES``, or the default."""
    env = os.environ.get("DSMON_DEEPSPEED_RELEASES")
    return cache or (Path(env) if env else DEFAULT_CACHE)


def source(version: str, cache: Path | None = None) -> Path:
    """The folder holding ``deepspeed/`` of a fetched release (raises if not fetched)."""
    where = cache_dir(cache) / version
    if not (where / "deepspeed").is_dir():
        raise FileNotFoundError(
            f"DeepSpeed {version} is not fetched: python scripts/deepspeed_releases.py fetch {version}"
        )
    return where


def _python_members(data: bytes, kind: str) -> Iterable[tuple[str, bytes]]:
    """(path under ``deepspeed/``, bytes) of every Python file of an sdist."""
    if kind == "zip":
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for name in zf.namelist():
                yield name, zf.read(name)
        return
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tf:
        for member in tf.getmembers():
            if member.isfile():
                handle = tf.extractfile(member)
                if handle is not None:
                    yield member.name, handle.read()


def fetch(version: str, url: str, sha256: str, cache: Path | None = None) -> Path:
    """Download one sdist (unless kept already) and keep its ``deepspeed/**.py`` files."""
    where = cache_dir(cache) / version
    if (where / "deepspeed").is_dir():
        return where
    with urllib.request.urlopen(url, timeout=300) as resp:
        data = resp.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise ValueError(f"DeepSpeed {version}: sha256 {digest} is not the index's {sha256}")
    kind = "zip" if url.endswith(".zip") else "tar.gz"
    partial = where.with_name(version + ".partial")
    for name, body in _python_members(data, kind):
        rel = Path(*Path(name).parts[1:])  # drop the sdist's top folder
        if rel.parts and rel.parts[0] == "deepspeed" and rel.suffix == ".py":
            out = partial / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(body)
    partial.rename(where)
    return where


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: list, fetch or locate releases."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, help=f"where sources are kept (default {DEFAULT_CACHE})")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="every release with an sdist on PyPI")
    f = sub.add_parser("fetch", help="fetch releases into the cache")
    f.add_argument("versions", nargs="*")
    f.add_argument("--all", action="store_true", help="every release")
    p = sub.add_parser("path", help="where a fetched release lies")
    p.add_argument("version")
    args = ap.parse_args(argv)
    if args.cmd == "path":
        print(source(args.version, args.cache))
        return 0
    known = releases()
    if args.cmd == "list":
        print("\n".join(known))
        return 0
    wanted = list(known) if args.all else args.versions
    missing = [v for v in wanted if v not in known]
    if missing:
        print(f"deepspeed_releases: no sdist on PyPI for {', '.join(missing)}", file=sys.stderr)
        return 2
    for v in wanted:
        print(fetch(v, *known[v], cache=args.cache))
    return 0


if __name__ == "__main__":
    sys.exit(main())
