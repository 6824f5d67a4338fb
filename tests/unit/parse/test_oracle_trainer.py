"""The Hugging Face Trainer's log dicts as each transformers release writes them: read back.

tests/oracle/trainer/log.json holds what ``ProgressCallback.on_log`` of transformers 4.5 to 5.18
wrote for a training step, an evaluation and the end of training (scripts/trainer_formats.py,
run by hand on the wheels). Each line is parsed as ``dsmon parse`` reads a log, and the record
must hold the figures the line printed: numbers in 4.x, ``.4g`` strings in 5.x.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from typing import Any

import pytest
from locations import TESTS

from dsmon.model.records import IterationRecord
from dsmon.parse.log import parse_text

ORACLE = TESTS / "oracle" / "trainer" / "log.json"
FMT = {"train": "trainer", "eval": "trainer_eval", "summary": "trainer_summary"}


def forms() -> Iterator[Any]:
    for n, f in enumerate(json.loads(ORACLE.read_text())["forms"]):
        yield pytest.param(f, id=f"{n}-{f['case']}-{f['releases'][0]}..{f['releases'][-1]}")


@pytest.mark.parametrize("f", list(forms()))
def test_trainer_log_dict(f: dict[str, Any]) -> None:
    recs, diag = parse_text(f["line"])
    assert not diag.unparsed, diag.examples
    (rec,) = [r for r in recs if isinstance(r, IterationRecord)]
    assert rec.fmt == FMT[f["case"]]
    shown = {k: float(v) for k, v in ast.literal_eval(f["line"]).items()}
    if f["case"] == "train":
        assert (rec.loss, rec.lr, rec.grad_norm) == (
            shown["loss"],
            shown["learning_rate"],
            shown["grad_norm"],
        )
    elif f["case"] == "eval":
        assert rec.loss == shown["eval_loss"]
    else:
        assert rec.losses["train_loss"] == shown["train_loss"]
