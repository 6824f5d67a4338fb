"""Megatron's iteration and memory lines from every version of its source: read back.

tests/oracle/megatron/*.json hold the lines each distinct version of Megatron-LM's and
Megatron-DeepSpeed's ``training_log`` and ``report_memory`` printed (scripts/megatron_formats.py,
run by hand over both repositories' history), every optional field on, with the values each
``log_string`` piece printed. Each line is parsed as ``dsmon parse`` reads a log, bare and behind
a Megatron/ezpz timestamp header, and the record must give the values back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from locations import TESTS

from dsmon.model.records import IterationRecord, MemoryRecord
from dsmon.parse.families.megatron import meaning
from dsmon.parse.log import parse_text

ORACLE = TESTS / "oracle" / "megatron"
MiB = 1024**2


def forms(kind: str) -> Iterator[Any]:
    data = json.loads((ORACLE / f"{kind}.json").read_text())
    for n, f in enumerate(data["forms"]):
        name = f["repo"].split("/")[-1]
        yield pytest.param(f, id=f"{n}-{name}-{f['first_date']}..{f.get('last_date', '')}")


#: A piece's printed name -> the record field it fills and the unit factor of its value.
FIELDS = {
    "consumed samples": ("consumed_samples", 1),
    "consumed tokens": ("consumed_tokens", 1),
    "elapsed time per iteration": ("elapsed_ms", 1),
    "learning rate": ("lr", 1),
    "global batch size": ("global_batch_size", 1),
    "lm loss": ("loss", 1),
    "loss scale": ("loss_scale", 1),
    "grad norm": ("grad_norm", 1),
    "num zeros": ("num_zeros", 1),
    "number of skipped iterations": ("skipped_iterations", 1),
    "number of nan iterations": ("nan_iterations", 1),
    "samples per second": ("samples_per_s", 1),
    "tokens per gpu per second": ("tokens_per_gpu_per_s", 1),
    "actual seqlen": ("actual_seqlen", 1),
    "tflops": ("flops_per_s_per_gpu", 1e12),
    "throughput per gpu": ("flops_per_s_per_gpu", 1e12),
}


def printed(piece: dict[str, Any]) -> tuple[str, float] | None:
    """A piece's name (by meaning) and the number it printed (read back from its text)."""
    name, _, value = piece["text"].strip(" |").partition(":")
    words = meaning(name)[0]
    try:
        return words, float(value.split()[0])
    except (IndexError, ValueError):
        return None


@pytest.mark.parametrize("header", ["", "[2024-04-21 02:45:08][INFO][training:1251] - "])
@pytest.mark.parametrize("f", list(forms("iteration")))
def test_iteration_line(f: dict[str, Any], header: str) -> None:
    recs, diag = parse_text(header + f["line"])
    assert not diag.unparsed and not diag.cut, diag.examples
    (it,) = [r for r in recs if isinstance(r, IterationRecord)]
    first = f["pieces"][0]["values"]
    assert (it.iteration, it.total_iterations, it.step) == (
        first["iteration"],
        first["args.train_iters"],
        first["iteration"],
    )
    checked = 0
    for piece in f["pieces"][1:]:
        got = printed(piece)
        if got is None or got[0] not in FIELDS:
            continue
        field, factor = FIELDS[got[0]]
        assert getattr(it, field) == pytest.approx(got[1] * factor, rel=1e-9), piece["text"]
        checked += 1
    assert checked >= 4  # at least elapsed time, learning rate, loss, loss scale


@pytest.mark.parametrize("f", list(forms("memory")))
def test_memory_line(f: dict[str, Any]) -> None:
    recs, diag = parse_text(f["line"])
    assert not diag.unparsed, diag.examples
    (mem,) = [r for r in recs if isinstance(r, MemoryRecord)]
    assert mem.label == "after 10 iterations" and mem.step == 10
    assert mem.allocated_bytes == round(3.71 * 1024 * MiB)
    assert mem.max_allocated_bytes == 39 * 1024 * MiB
    assert mem.cached_bytes == round(5.5 * 1024 * MiB)
    assert mem.max_cached_bytes == round(6.25 * 1024 * MiB)
    if f["line"].startswith("[Rank "):
        assert mem.src.rank == 0
