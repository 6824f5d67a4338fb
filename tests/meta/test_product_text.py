"""Product text speaks of DeepSpeed, the user's run and public references only.

Users have neither dsmon's internal research notes nor the documents its checks were first
drafted from, so no product file (code whose strings reach the UI, CLI output or error
messages, the docs, the README) may name them: not "seed" as a word (also inside identifiers
such as ``SEED_NOTE`` or ``seed_line``, which end up in text sooner or later) and not
"tuning guide". Real DeepSpeed names that contain the word are allowed; logs DeepSpeed wrote
(``*.log``) are its own output, not dsmon's text.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("dsmon", "collectors", "pages", "docs", "app.py", "README.md")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".json", ".txt", ".html", ".css", ".sh"}
#: "seed" as a word: not inside a longer word, but ``_`` counts as a separator.
SEED = re.compile(r"(?<![a-z0-9])seeds?(?![a-z0-9])", re.IGNORECASE)
TUNING_GUIDE = re.compile(r"tuning[\s_-]*guides?", re.IGNORECASE)
#: DeepSpeed's own names containing the word (the pipeline section's seed_layers key, the
#: data efficiency library's seed, as dsmon/data/ds_config/releases.json lists them).
ALLOWED = ("seed_layers", "data_efficiency.seed")


def product_files() -> list[Path]:
    """Every text file of the product, in a stable order."""
    out: list[Path] = []
    for name in PRODUCT:
        path = ROOT / name
        files = [path] if path.is_file() else sorted(path.rglob("*"))
        out += [f for f in files if f.is_file() and f.suffix in TEXT_SUFFIXES]
    return out


def hits(text: str) -> list[str]:
    """The offending words of one text, after removing DeepSpeed's own names."""
    for allowed in ALLOWED:
        text = text.replace(allowed, "")
    return [m.group(0) for m in (*SEED.finditer(text), *TUNING_GUIDE.finditer(text))]


def test_the_scan_covers_the_product() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in product_files()}
    assert {"app.py", "README.md", "pages/flops.py", "dsmon/analysis/peaks.py"} <= names
    assert any(n.startswith("docs/") for n in names)
    assert any(n.startswith("collectors/") for n in names)


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("the tuning guide's checks", ["tuning guide"]),
        ("Tuning-Guide section", ["Tuning-Guide"]),
        ("(seed 004's target)", ["seed"]),
        ("SEED_A100_NOTE", ["SEED"]),
        ("def seed_line(", ["seed"]),
        ("the seeds in shared/", ["seeds"]),
        ("'seed_layers': False", []),
        ("seedling, reseeded", []),
    ],
)
def test_hits(text: str, found: list[str]) -> None:
    assert hits(text) == found


def test_no_internal_documents_in_product_text() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {word!r}"
        for path in product_files()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        for word in hits(line)
    ]
    assert found == []
