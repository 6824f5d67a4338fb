"""GPU samples as typed rows: the compact layout a day of 1 Hz NVML polls is stored in.

A sample stored as a JSON body with a 16-byte key and five indexes takes about 600 bytes; 64
GPUs for a day are 5.5 million of them. Here a sample becomes a row of numbers under its GPU
*series* (run, node, file, sub, GPU index: the part of its identity that never changes), so
the store keeps one small row per sample and the fields that rarely change (model name,
UUID, memory size, power limit) once per series.

The mapping is lossless: whatever does not fit the typed columns (a timestamp not in the
collectors' millisecond form, a power figure that is not a whole number of milliwatts, a
series field that changed, a source line) goes to the row's ``extra`` JSON, and
:func:`sample_record` gives back a record equal to the one stored. Units follow NVML's own:
power in mW, energy in mJ, which NVML reports as integers.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from dsmon.model.records import GpuSampleRecord, Source
from dsmon.model.wire import json_value

_EPOCH = datetime(1970, 1, 1)
#: A time in the collectors' form: what ``isoformat(timespec="milliseconds")`` writes of a
#: zone-less time (ASCII digits only).
_COLLECTOR_TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}", re.ASCII).fullmatch
#: A named tuple from a tuple of its fields, without the keyword handling of its ``__new__``.
_new = tuple.__new__

#: Fields of a sample stored once per series (the first sample's values).
SERIES_FIELDS = ("uuid", "name", "mem_total_bytes", "power_limit_w")
#: Fields stored as they are (floats and integers SQLite keeps compactly).
PLAIN_FIELDS = (
    "util_gpu_pct",
    "util_mem_pct",
    "temperature_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "throttle_reasons",
    "ecc_corrected",
    "ecc_uncorrected",
)
#: GPM metrics (Hopper and newer), in percent: three in one integer column (:func:`pack_gpm`).
GPM_FIELDS = ("gpm_sm_active_pct", "gpm_tensor_active_pct", "gpm_dram_bw_pct")
#: Bits of ``gpm`` per metric, a whole number of hundredths of a percent; all ones: none.
_GPM_BITS = 14
_GPM_NONE = (1 << _GPM_BITS) - 1


class Scaled(NamedTuple):
    """A field stored as a whole number in NVML's own unit: ``field * mul / div``.

    Power and energy come from NVML in mW and mJ, memory and PCIe throughput in KiB: the
    collector's W, J and bytes are those integers rescaled, so the integer comes back exact
    (a value that does not is kept in ``extra``). Whole numbers take 1-6 bytes, not 8.
    """

    field: str
    column: str
    mul: int
    div: int
    cast: type  # the field's Python type when read back


SCALED_FIELDS = (
    Scaled("mem_used_bytes", "mem_used_kib", 1, 1024, int),
    Scaled("power_w", "power_mw", 1000, 1, float),
    Scaled("energy_j", "energy_mj", 1000, 1, float),
    Scaled("pcie_tx_bytes_per_s", "pcie_tx_kib_per_s", 1, 1024, float),
    Scaled("pcie_rx_bytes_per_s", "pcie_rx_kib_per_s", 1, 1024, float),
)
#: The sample columns after (id, series, t_ms), in table order. XID events are rare: kept
#: in ``extra`` rather than costing every sample a column.
SAMPLE_COLUMNS = (*PLAIN_FIELDS, "gpm", *(sc.column for sc in SCALED_FIELDS), "extra")
_SOURCE_EXTRA = ("file", "line", "offset", "rank")
GIB = 1024**3


def _missing(value: object) -> bool:
    return value is None or value != value  # NaN, as pandas gives a missing value


def gpu_label(node: object, gpu_index: object) -> str:
    """How a GPU is named on every chart: ``node/gpuN`` (``gpuN`` when the node is unknown)."""
    idx = "?" if _missing(gpu_index) else int(gpu_index)  # type: ignore[call-overload]
    return f"gpu{idx}" if _missing(node) else f"{node}/gpu{idx}"


# --- buckets: what roll-ups and page queries compute per GPU and time bucket ------------

#: (statistics prefix, record field, stored column, factor field -> column): the metrics
#: summed up per bucket, in the stored unit (memory in KiB, power in mW).
BUCKET_METRICS = (
    ("util", "util_gpu_pct", "util_gpu_pct", 1.0),
    ("mem", "mem_used_bytes", "mem_used_kib", 1 / 1024),
    ("power", "power_w", "power_mw", 1000.0),
    ("temp", "temperature_c", "temperature_c", 1.0),
    ("clock", "sm_clock_mhz", "sm_clock_mhz", 1.0),
)
#: NVML clock-event reason bits the rules name (nvmlClocksEventReason* in nvml.h).
SW_POWER_CAP, HW_SLOWDOWN, SW_THERMAL, HW_THERMAL, HW_POWER_BRAKE = 0x4, 0x8, 0x20, 0x40, 0x80
#: Every NVML clock-event ("throttle") reason bit, with the name nvidia-smi gives it.
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "GPU idle"),
    (0x2, "Applications clocks setting"),
    (SW_POWER_CAP, "SW power cap"),
    (HW_SLOWDOWN, "HW slowdown"),
    (0x10, "Sync boost"),
    (SW_THERMAL, "SW thermal slowdown"),
    (HW_THERMAL, "HW thermal slowdown"),
    (HW_POWER_BRAKE, "HW power brake"),
    (0x100, "Display clock setting"),
)
#: The reason bits counted per bucket: every one.
THROTTLE_BITS = tuple(bit for bit, _ in THROTTLE_REASONS)
#: The statistics kept per bucket metric.
STATS = ("n", "sum", "min", "max")
#: A bucket's columns after (series, bucket, count), in the order every source computes them.
BUCKET_STATS = (
    *(f"{p}_{s}" for p, _, _, _ in BUCKET_METRICS for s in STATS),
    "thr_n",
    *(f"thr_{bit}" for bit in THROTTLE_BITS),
    "ecc_c_min",
    "ecc_c_max",
    "ecc_u_max",
    "xid_max",
    "t_min_ms",
    "t_max_ms",
)


class SeriesKey(NamedTuple):
    """What names one GPU's series: the identity of a sample minus its time."""

    run: str
    node: str
    file: str
    sub: int
    gpu_index: int


class SeriesInfo(NamedTuple):
    """A series' stored row: its id, the time its offsets count from, its fixed fields."""

    id: int
    t0_ms: int
    fixed: tuple[Any, ...]  # values of SERIES_FIELDS


class SampleRow(NamedTuple):
    """One sample ready to store, before its series id and offset are known."""

    key: SeriesKey
    t_ms: int
    fixed: tuple[Any, ...]
    values: tuple[Any, ...]  # PLAIN_FIELDS, gpm, then the SCALED_FIELDS columns
    extra: dict[str, Any]


def ts_ms(ts: str) -> int | None:
    """A record time as milliseconds since 1970 on its own (zone-less) clock; None if none."""
    try:
        when = datetime.fromisoformat(ts)
    except ValueError:
        return None
    if when.tzinfo is not None:
        return None  # the collectors never write a zone: such a sample is kept as a record
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def ms_ts(t_ms: int) -> str:
    """The inverse of :func:`ts_ms` in the collectors' form (``2026-11-29T14:10:22.818``)."""
    return (_EPOCH + timedelta(milliseconds=t_ms)).isoformat(timespec="milliseconds")


def _scaled(value: Any, sc: Scaled) -> int | None:
    """The stored integer of ``value``, or None when it would not come back exact."""
    if value is None or isinstance(value, bool):
        return None
    if sc.div == 1:
        whole = round(value * sc.mul)
        return whole if whole / sc.mul == value else None
    whole = int(value) // sc.div
    return whole if whole * sc.div == value else None


def _unscaled(raw: Any, sc: Scaled) -> Any:
    """The field's value from its stored integer."""
    if raw is None:
        return None
    return sc.cast(raw * sc.div) if sc.div != 1 else sc.cast(raw / sc.mul)


def pack_gpm(values: tuple[Any, ...]) -> tuple[int | None, dict[str, Any]]:
    """The ``gpm`` column of the three GPM percentages, and those it cannot hold exactly.

    NVML computes them as doubles; the collector rounds them to a hundredth of a percent,
    which 14 bits hold: one 6-byte integer, not three 8-byte floats, and one header byte,
    not three, on a GPU that has none. A value that is not such a float goes to ``extra``.
    """
    packed, kept, left = 0, False, {}
    for i, (name, value) in enumerate(zip(GPM_FIELDS, values, strict=True)):
        whole = _GPM_NONE
        if isinstance(value, float) and math.isfinite(value):
            whole = round(value * 100)
            if not (0 <= whole < _GPM_NONE and whole / 100 == value):
                whole = _GPM_NONE
        if whole == _GPM_NONE and value is not None:
            left[name] = value
        kept = kept or whole != _GPM_NONE
        packed |= whole << (i * _GPM_BITS)
    return (packed if kept else None), left


def unpack_gpm(packed: Any) -> dict[str, float | None]:
    """The GPM percentages of a ``gpm`` column (:func:`pack_gpm`); None where it has none."""
    if packed is None:
        return dict.fromkeys(GPM_FIELDS)
    out: dict[str, float | None] = {}
    for i, name in enumerate(GPM_FIELDS):
        whole = (int(packed) >> (i * _GPM_BITS)) & _GPM_NONE
        out[name] = None if whole == _GPM_NONE else whole / 100
    return out


def sample_row(rec: GpuSampleRecord) -> SampleRow | None:
    """The typed row of a sample; None for one that cannot be placed in time (no ``ts``)."""
    if rec.ts is None:
        return None
    t_ms = ts_ms(rec.ts)
    if t_ms is None:
        return None
    s = rec.src
    extra: dict[str, Any] = {k: getattr(s, k) for k in _SOURCE_EXTRA if getattr(s, k) is not None}
    if ms_ts(t_ms) != rec.ts:
        extra["ts"] = rec.ts
    if rec.step is not None:
        extra["step"] = rec.step
    values: list[Any] = [json_value(getattr(rec, f)) for f in PLAIN_FIELDS]
    gpm, left = pack_gpm(tuple(json_value(getattr(rec, f)) for f in GPM_FIELDS))
    values.append(gpm)
    extra.update(left)
    for sc in SCALED_FIELDS:
        raw = json_value(getattr(rec, sc.field))
        scaled = _scaled(raw, sc)
        values.append(scaled)
        if scaled is None and raw is not None:
            extra[sc.field] = raw
    if rec.xid is not None:
        extra["xid"] = rec.xid
    key = SeriesKey(s.run, s.node or "", s.file or "", s.sub, rec.gpu_index)
    fixed = tuple(json_value(getattr(rec, f)) for f in SERIES_FIELDS)
    return SampleRow(key, t_ms, fixed, tuple(values), extra)


def collector_ms(ts: str, when: datetime) -> int | None:
    """A sample's time as :attr:`SampleRow.t_ms` if ``ts`` is in the collector's form, else None.

    ``when`` is ``ts`` parsed. The collector's form is the millisecond time without a zone
    that :func:`ms_ts` writes back the same; a sample at any other time keeps it in ``extra``.
    The samples of one poll share their time: the ingest server asks once per time.
    """
    if not _COLLECTOR_TS(ts):
        return None
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def collector_sample_row(sample: Any, t_ms: int) -> SampleRow | None:
    """:func:`sample_row` of a sample in the collector's own form, without building a record.

    The ingest server decodes a GPU line into a struct with the record's fields
    (``dsmon.model.wire_types``) and checks its time (``t_ms``: :func:`collector_ms`). A
    collector's sample has no source position, step or XID, and NVML's whole mW, mJ and KiB:
    such a one becomes its row here in a few microseconds, each field looked at once in
    straight-line code rather than by a helper call per field. Anything else returns None,
    and the caller builds the record and asks :func:`sample_row`, which keeps what does not
    fit in ``extra``.
    """
    src = sample.src
    if (
        src.file is not None
        or src.line is not None
        or src.offset is not None
        or src.rank is not None
        or sample.step is not None
        or sample.xid is not None
    ):
        return None
    sm, tensor, dram = (
        sample.gpm_sm_active_pct,
        sample.gpm_tensor_active_pct,
        sample.gpm_dram_bw_pct,
    )
    if sm is None and tensor is None and dram is None:  # a GPU without GPM (an A100)
        gpm = None
    elif type(sm) is type(tensor) is type(dram) is float and (
        0 <= sm < _GPM_NONE and 0 <= tensor < _GPM_NONE and 0 <= dram < _GPM_NONE
    ):  # pack_gpm's, of three finite percentages
        sm_w, tensor_w, dram_w = round(sm * 100), round(tensor * 100), round(dram * 100)
        if not (
            sm_w < _GPM_NONE
            and tensor_w < _GPM_NONE
            and dram_w < _GPM_NONE
            and sm_w / 100 == sm
            and tensor_w / 100 == tensor
            and dram_w / 100 == dram
        ):
            return None
        gpm = sm_w | tensor_w << _GPM_BITS | dram_w << 2 * _GPM_BITS
    else:
        gpm, left = pack_gpm((sm, tensor, dram))
        if left:
            return None
    # SCALED_FIELDS, each as _scaled makes it (msgspec gives no bool for a number)
    mem, power, energy = sample.mem_used_bytes, sample.power_w, sample.energy_j
    tx, rx = sample.pcie_tx_bytes_per_s, sample.pcie_rx_bytes_per_s
    if mem is not None:
        mem = int(mem) // 1024
        if mem * 1024 != sample.mem_used_bytes:
            return None
    if power is not None:
        power = round(power * 1000)
        if power / 1000 != sample.power_w:
            return None
    if energy is not None:
        energy = round(energy * 1000)
        if energy / 1000 != sample.energy_j:
            return None
    if tx is not None:
        tx = int(tx) // 1024
        if tx * 1024 != sample.pcie_tx_bytes_per_s:
            return None
    if rx is not None:
        rx = int(rx) // 1024
        if rx * 1024 != sample.pcie_rx_bytes_per_s:
            return None
    values = (
        sample.util_gpu_pct,
        sample.util_mem_pct,
        sample.temperature_c,
        sample.sm_clock_mhz,
        sample.mem_clock_mhz,
        sample.throttle_reasons,
        sample.ecc_corrected,
        sample.ecc_uncorrected,
        gpm,
        mem,
        power,
        energy,
        tx,
        rx,
    )
    key = _new(SeriesKey, (src.run, src.node or "", "", src.sub, sample.gpu_index))
    fixed = (sample.uuid, sample.name, sample.mem_total_bytes, sample.power_limit_w)
    return _new(SampleRow, (key, t_ms, fixed, values, {}))


def stored_values(row: SampleRow, series: SeriesInfo) -> tuple[Any, ...]:
    """The sample's columns under ``series``: fixed fields that differ go to ``extra``."""
    extra = dict(row.extra)
    for name, mine, theirs in zip(SERIES_FIELDS, row.fixed, series.fixed, strict=True):
        if mine != theirs:
            extra[name] = mine
    text = json.dumps(extra, separators=(",", ":")) if extra else None
    return (series.id, row.t_ms - series.t0_ms, *row.values, text)


def sample_record(
    key: SeriesKey, t_ms: int, fixed: tuple[Any, ...], values: tuple[Any, ...]
) -> GpuSampleRecord:
    """The record a stored row stands for (``values``: :data:`SAMPLE_COLUMNS`, absolute time)."""
    named = dict(zip(SAMPLE_COLUMNS, values, strict=True))
    extra: dict[str, Any] = json.loads(named["extra"]) if named["extra"] else {}
    fields: dict[str, Any] = dict(zip(SERIES_FIELDS, fixed, strict=True))
    fields.update((f, named[f]) for f in PLAIN_FIELDS)
    fields.update(unpack_gpm(named["gpm"]))
    for sc in SCALED_FIELDS:
        fields[sc.field] = _unscaled(named[sc.column], sc)
    src_extra = {k: extra.pop(k) for k in _SOURCE_EXTRA if k in extra}
    src = Source(run=key.run, node=key.node or None, sub=key.sub, **src_extra)
    ts = extra.pop("ts", None) or ms_ts(t_ms)
    step = extra.pop("step", None)
    fields.update(extra)
    return GpuSampleRecord(src=src, ts=ts, step=step, gpu_index=key.gpu_index, **fields)


#: The columns a sample ``s`` of series ``ser`` is read back from (:func:`record_of`).
SAMPLE_SELECT = (
    "ser.run, ser.node, ser.file, ser.sub, ser.gpu_index, s.t_ms + ser.t0_ms, "
    f"{', '.join('ser.' + f for f in SERIES_FIELDS)}, "
    f"{', '.join('s.' + c for c in SAMPLE_COLUMNS)}"
)


def record_of(row: Sequence[Any]) -> GpuSampleRecord:
    """The record of a row read with :data:`SAMPLE_SELECT`."""
    n_fixed = len(SERIES_FIELDS)
    return sample_record(
        SeriesKey(*row[:5]), int(row[5]), tuple(row[6 : 6 + n_fixed]), tuple(row[6 + n_fixed :])
    )


def cut_ms(ts_max: str | None) -> int | None:
    """A time bound (ISO text) as ms on the samples' clock; None stays None."""
    return None if ts_max is None else ts_ms(ts_max)


def iso_text(value: object) -> str | None:
    """A time bound as the ISO text records carry (datetimes and pandas Timestamps too)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, datetime):
        return value.replace(tzinfo=None).isoformat(timespec="milliseconds")
    return None


def grid(n_buckets: int, span: tuple[int, int], level_ms: int = 1) -> tuple[int, int]:
    """Start and width (ms) of ``n_buckets`` equal buckets over ``span``, aligned to ``level_ms``.

    Aligned so that a bucket is a whole number of roll-up buckets: sums over roll-ups then
    equal sums over the samples.
    """
    lo, hi = span
    t0 = lo - lo % level_ms
    width = max((hi - t0) // max(n_buckets, 1) + 1, 1)
    width = -(-width // level_ms) * level_ms
    return t0, width
