"""``dsmon parse`` and ``dsmon import`` say, by kind, which lines of a known kind they could not
read, with the first one: a user must see that iteration lines went unread.

The log is a real Megatron-DeepSpeed run (tests/data/megatron_ds095_llama, see its README) with
one iteration line's loss damaged (``lm loss: n/a``).
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from locations import DATA

from cli import main as cli


def damaged_log(tmp_path: Path) -> tuple[Path, int]:
    lines = (DATA / "megatron_ds095_llama" / "train.log").read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if "lm loss: 1.0" in ln)
    lines[at] = lines[at].replace("lm loss: 1.0", "lm loss: n/a")
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    return path, at + 1


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_parse_names_the_kind_and_the_line(tmp_path: Path) -> None:
    path, line = damaged_log(tmp_path)
    code, _, err = run("parse", str(path))
    assert code == 0
    assert "1 unparsed lines" in err
    assert "  unparsed megatron_iteration: 1\n" in err
    assert f"    train.log:{line}:  iteration        1/    2500 |" in err


def test_import_names_the_kind_and_the_line(tmp_path: Path) -> None:
    path, line = damaged_log(tmp_path)
    code, out, _ = run("import", str(path), "--store", str(tmp_path / "store.sqlite"))
    assert code == 0
    assert "; 1 lines or blocks not understood" in out
    assert f"  unparsed megatron_iteration: 1, the first: train.log:{line}:  iteration " in out
