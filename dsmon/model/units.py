"""The one place where DeepSpeed's human-readable numbers become plain numbers.

DeepSpeed prints most figures through small formatting helpers: the flops profiler's
``number_to_string`` family (``234.88 MMACs``, ``471.76 M``, ``13.51 GFLOPS``, ``833.75 us``,
``932.61 K`` params, ``1.3 B`` params, ``12 `` with a trailing space), the comms logger's
``convert_size`` (``256.0 MB`` 1024-based, ``0B``) and GiB figures (``0.37GB``). Older releases
used fixed tables with a lower-case ``k`` and bare ``str(x)`` values. Every parser reads those
strings through this module, so a unit is interpreted the same way everywhere.

Every function returns ``None`` for text it cannot read instead of raising: a parser turns
``None`` into "field missing" and counts the line, it never crashes on odd input.

Scaling is done in decimal arithmetic (``Decimal.scaleb``), so ``234.88 M`` becomes exactly the
float ``234.88e6`` and ``833.75 us`` exactly ``0.83375`` ms, as a reader computing by hand expects.

Human sizes are 1024-based and rounded to two decimals by DeepSpeed (``3.56 MB``), so the true
byte count is lost. :func:`parse_size_bytes` returns the integer nearest to the printed figure
(``round(3.56 * 1024**2)`` = 3732931): that is exact for whole units (``256.0 KB``, ``0B``) and
off by at most half a unit of the last printed digit otherwise.
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal, InvalidOperation

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan)"

#: Decimal exponent of each SI prefix DeepSpeed prints (``k`` is the pre-v0.10.1 kilo).
SI_EXPONENTS: dict[str, int] = {
    "T": 12,
    "G": 9,
    "M": 6,
    "K": 3,
    "k": 3,
    "": 0,
    "m": -3,
    "u": -6,
}

#: 1024-power of each ``convert_size`` unit.
SIZE_POWERS: dict[str, int] = {
    "B": 0,
    "KB": 1,
    "MB": 2,
    "GB": 3,
    "TB": 4,
    "PB": 5,
    "EB": 6,
    "ZB": 7,
    "YB": 8,
}

_SI = re.compile(rf"^(?P<num>{_NUMBER})\s*(?P<prefix>[TGMKkmu]?)$")
_SIZE = re.compile(rf"^\s*(?P<num>{_NUMBER})\s*(?P<unit>[KMGTPEZY]?B)\s*$")


def _decimal(text: str) -> Decimal | None:
    """A Decimal from number text, or None when it is not one."""
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


def _scaled(num: str, exponent: int) -> float | None:
    """``num * 10**exponent`` rounded once, so printed figures map to their exact literal."""
    value = _decimal(num)
    if value is None:
        return None
    return float(value.scaleb(exponent))


def parse_float(text: str | None) -> float | None:
    """A plain number (``83.67``, ``-0.5``, ``1e-05``, ``inf``), else None."""
    if text is None:
        return None
    value = _decimal(text.strip())
    return None if value is None else float(value)


def parse_int(text: str | None) -> int | None:
    """A plain integer (``2``, ``128``), else None; ``2.0`` is not an integer count."""
    if text is None:
        return None
    text = text.strip()
    if not re.fullmatch(r"[-+]?\d+", text):
        return None
    return int(text)


def _split_unit(text: str, unit: str) -> tuple[str, bool]:
    """The text without a trailing unit word, and whether the word was there."""
    stripped = text.strip()
    if unit and stripped.endswith(unit):
        return stripped[: -len(unit)].strip(), True
    return stripped, False


def _si_value(text: str, exponent_shift: int = 0) -> float | None:
    """``"234.88 M"`` -> 234.88e6 (times ``10**exponent_shift``); None if not that shape."""
    m = _SI.match(text)
    if not m:
        return None
    return _scaled(m.group("num"), SI_EXPONENTS[m.group("prefix")] + exponent_shift)


def parse_si(text: str | None, unit: str = "") -> float | None:
    """An SI-prefixed figure with an optional unit word, in the unit's base.

    ``parse_si("471.76 M")`` is 471.76e6, ``parse_si("12 ")`` 12.0, and with ``unit="MACs"``
    ``234.88 MMACs`` is 234.88e6. The unit word may be left out (v0.3 printed MACs as
    ``3139.93 G``), but any other word is rejected, so a duration is never read as a count.

    Args:
        text: the printed figure.
        unit: the unit word that may follow the prefix (``""``, ``MACs``, ``FLOPS``).
    """
    if text is None:
        return None
    head, _ = _split_unit(text, unit)
    return _si_value(head)


def parse_params(text: str | None) -> float | None:
    """A parameter count: ``932.61 K``, ``9.41 k``, ``336.23 M``, ``2.39 B`` (billions), ``512``."""
    if text is None:
        return None
    head, billions = _split_unit(text, "B")
    if billions:
        m = _SI.match(head)
        return _scaled(m.group("num"), 9) if m and not m.group("prefix") else None
    return _si_value(head)


def parse_macs(text: str | None) -> float | None:
    """Multiply-accumulate operations: ``234.88 MMACs`` -> 234.88e6, ``0 MACs`` -> 0.0."""
    return parse_si(text, "MACs")


def parse_flops_rate(text: str | None) -> float | None:
    """Floating-point operations per second: ``13.51 GFLOPS`` -> 13.51e9, ``260 mFLOPS``."""
    return parse_si(text, "FLOPS")


def parse_duration_ms(text: str | None) -> float | None:
    """A duration in milliseconds: ``1.23 s`` -> 1230.0, ``123.45 ms``, ``833.75 us`` -> 0.83375.

    Also reads the profiler's odd magnitudes as printed (``1.8 Gs``) and the pre-v0.10.1 bare
    ``str(duration)`` for sub-microsecond times, which is in seconds.
    """
    if text is None:
        return None
    head, has_unit = _split_unit(text, "s")
    if not has_unit and head[-1:].isalpha():
        return None  # a bare prefix ("5 m") is not a duration
    return _si_value(head, 3)


def parse_size_bytes(text: str | None) -> int | None:
    """A ``convert_size`` figure in bytes: ``256.0 MB`` -> 268435456, ``0B`` -> 0.

    The figure was rounded to two decimals when printed; the result is the nearest integer to
    the printed value (see the module docstring).
    """
    if text is None:
        return None
    m = _SIZE.match(text)
    if not m:
        return None
    value = _decimal(m.group("num"))
    if value is None or not value.is_finite():
        return None
    return round(value * (1024 ** SIZE_POWERS[m.group("unit")]))


def parse_gb_bytes(text: str | float | None) -> int | None:
    """A GiB figure as DeepSpeed prints memory (``0.37GB``, ``0.37 GB``, ``0.37``) in bytes.

    DeepSpeed divides by ``1024**3`` and calls it GB, so ``0.37GB`` is ``round(0.37 * 1024**3)``.
    """
    if text is None:
        return None
    raw = str(text).strip()
    if raw.endswith("GB"):
        raw = raw[:-2].strip()
    value = _decimal(raw)
    if value is None or not value.is_finite():
        return None
    return round(value * (1024**3))


def parse_ts(text: str | None) -> datetime | None:
    """The moment an ISO-8601 ``ts`` names, or None for one no calendar has (``2026-19-39``).

    Every entry point checks a record's time with it (the ingest API, the record checks), so a
    time no calendar has is refused before it can be stored.
    """
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except (ValueError, TypeError):
        return None
