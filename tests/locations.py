"""Where the tests find things: the tests folder, the repository root, the real-run corpus."""

from __future__ import annotations

from pathlib import Path

#: tests/ (test modules live in tests/unit/<package>/, tests/system/ and tests/meta/).
TESTS = Path(__file__).resolve().parent
#: The repository root.
ROOT = TESTS.parent
#: tests/data/: real DeepSpeed runs, one folder each with its README.md.
DATA = TESTS / "data"
#: tests/system/: real processes, a browser, real DeepSpeed jobs; every test there is ``slow``.
SYSTEM = TESTS / "system"
