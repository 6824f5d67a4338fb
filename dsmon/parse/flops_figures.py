"""How the flops profiler prints its figures, in every layout: summary labels and module numbers.

DeepSpeed changed the summary's wording and layout several times (``Summary of forward pass``
in 0.3, 60-column labels with ``params per gpu`` and the ``paralel`` typo until v0.10.1, 70
columns since, the forward-only summary of ``get_model_profile``), and the module entries from
``X, Y% Params`` to ``X = Y% Params``. This module maps each printed form to a record field,
so :mod:`dsmon.parse.flops_profiler` follows the block and never the wording.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from dsmon.model import units
from dsmon.model.records import ModuleProfile

_FACTOR = re.compile(r"= (\d+(?:\.\d+)?) \*")
#: A module entry's numbers: ``X = Y% Params, ...`` since v0.10.1, ``X, Y% Params, ...`` before.
_NEW_STATS = re.compile(
    r"^(?P<params>[^,=]+?) = (?P<params_pct>\S+)% Params, (?P<macs>[^,=]+?) = (?P<macs_pct>\S+)%"
    r" MACs, (?P<lat>[^,=]+?) = (?P<lat_pct>\S+)% latency, (?P<flops>[^,]+?)(?:, (?P<extra>.*))?$"
)
_OLD_STATS = re.compile(
    r"^(?P<params>[^,]+?), (?P<params_pct>\S+)% Params, (?P<macs>[^,]+?), (?P<macs_pct>\S+)% MACs,"
    r" (?P<lat>[^,]+?), (?P<lat_pct>\S+)% (?:latency|time), (?P<flops>[^,]+?)(?:, ?(?P<extra>.*))?$"
)

Parse = Callable[[str], Any]
_INT, _PARAMS, _MACS, _COUNT = units.parse_int, units.parse_params, units.parse_macs, units.parse_si
_MS, _RATE = units.parse_duration_ms, units.parse_flops_rate

#: Summary labels by meaning, first match wins, tried on the label as :func:`_normalise` gives
#: it (lower case, one space, ``FLOPS`` as ``flops/s``, ``per device`` as ``per gpu``). The
#: pre-0.4 forward-only summary (``Number of parameters:``, ``Latency:``) reads into the same
#: fields as the engine summary of later versions.
SUMMARY_LABELS: tuple[tuple[re.Pattern[str], str, Parse], ...] = tuple(
    (re.compile(pattern), name, parse)
    for pattern, name, parse in (
        (r"profile step$", "profile_step", _INT),
        (r"world size$", "world_size", _INT),
        (r"data parallel size$", "data_parallel_size", _INT),
        (r"model parallel size$", "model_parallel_size", _INT),
        (r"batch size per gpu$", "batch_size_per_gpu", _INT),
        (r"params per gpu$|number of parameters$", "params_per_gpu", _PARAMS),
        (r"params of model(?: =|$)", "params_total", _PARAMS),
        (r"fwd macs per gpu$|number of multiply-accumulate operations", "fwd_macs_per_gpu", _MACS),
        (
            r"fwd flops per gpu(?: =|$)|number of floating[- ]point operations(?! per)",
            "fwd_flops_per_gpu",
            _COUNT,
        ),
        (r"fwd flops of model", "fwd_flops_total", _COUNT),
        (r"(?:fwd )?latency$", "fwd_latency_ms", _MS),
        (
            r"fwd flops/s per gpu|floating[- ]point operations per second",
            "fwd_flops_per_s_per_gpu",
            _RATE,
        ),
        (r"bwd latency$", "bwd_latency_ms", _MS),
        (r"bwd flops/s per gpu", "bwd_flops_per_s_per_gpu", _RATE),
        (r"fwd\+bwd flops/s per gpu", "fwd_bwd_flops_per_s_per_gpu", _RATE),
        (r"step latency$", "step_latency_ms", _MS),
        (r"iter latency$", "iter_latency_ms", _MS),
        (r"flops/s per gpu", "flops_per_s_per_gpu", _RATE),
        (r"samples(?:/| per )second$", "samples_per_s", units.parse_float),
    )
)

#: How the bwd_factor is read off a label's ``= N *``: the fwd+bwd and iter factors are N - 1.
FACTOR_OFFSET = {"bwd_flops_per_s_per_gpu": 0, "fwd_bwd_flops_per_s_per_gpu": 1}
FACTOR_OFFSET["flops_per_s_per_gpu"] = 1

AGG_METRICS: dict[str, tuple[str, Parse]] = {
    "params": ("params", _PARAMS),
    "MACs": ("macs", _MACS),
    "flops": ("flops", _COUNT),
    "fwd latency": ("fwd_latency", _MS),
    "latency": ("fwd_latency", _MS),
}


def _normalise(label: str) -> tuple[str, float | None]:
    """A label in one spelling for every version, and the ``= N *`` factor it carried.

    Case is dropped except where it carries meaning: ``fwd flops per GPU`` is a count and
    ``fwd FLOPS per GPU`` a rate, so ``FLOPS`` becomes ``flops/s`` first.
    """
    text = " ".join(label.split()).rstrip(":").rstrip()
    m = _FACTOR.search(text)
    text = text.replace("FLOPS", "flops/s").lower().replace("paralel ", "parallel ")
    text = re.sub(r"\bper (?:gpu|device)\b", "per gpu", text)
    return text, float(m.group(1)) if m else None


def summary_field(label: str) -> tuple[str, Parse, float | None] | None:
    """The record field a summary label stands for, its reader and its ``= N *`` factor."""
    text, factor = _normalise(label)
    for pattern, name, parse in SUMMARY_LABELS:
        if pattern.match(text):
            return name, parse, factor
    return None


def match_stats(text: str) -> re.Match[str] | None:
    """The profiler's numbers in either the v0.10.1+ or the older layout."""
    return _NEW_STATS.match(text) or _OLD_STATS.match(text)


def apply_stats(module: ModuleProfile, m: re.Match[str]) -> ModuleProfile:
    """Fill a module's figures from a matched numbers text."""
    return replace(
        module,
        params=units.parse_params(m.group("params")),
        params_pct=units.parse_float(m.group("params_pct")),
        macs=units.parse_macs(m.group("macs")),
        macs_pct=units.parse_float(m.group("macs_pct")),
        fwd_latency_ms=units.parse_duration_ms(m.group("lat")),
        fwd_latency_pct=units.parse_float(m.group("lat_pct")),
        fwd_flops_per_s=units.parse_flops_rate(m.group("flops")),
        extra=(m.group("extra") or "").strip() or None,
    )
