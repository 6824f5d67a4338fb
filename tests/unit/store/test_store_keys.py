"""Store keys: unique per identity, and sorted as a log is written.

The keys are what the UNIQUE index holds, so their order decides where each insert lands:
a real log's records must get keys that grow with their place in the log.
"""

from __future__ import annotations

from itertools import pairwise

from dsmon.model.records import Record, record_key
from dsmon.store.records.keys import (
    KEY_BYTES,
    MAX_PLACE,
    identity_digest,
    key_digest,
    place_key,
    source_head,
)


def test_keys_of_a_real_log_are_unique_and_grow_with_its_lines(
    z2_log_records: list[Record],
) -> None:
    keys = [key_digest(r) for r in z2_log_records]
    assert len(set(keys)) == len(keys) == len({record_key(r) for r in z2_log_records})
    assert {len(k) for k in keys} == {KEY_BYTES}
    assert len({k[:8] for k in keys}) == 1  # one file: one source part
    places = [(r.src.offset, k[8:16]) for r, k in zip(z2_log_records, keys, strict=True)]
    assert all(r.src.offset is not None for r in z2_log_records)
    for (off_a, key_a), (off_b, key_b) in pairwise(sorted(places)):
        assert key_a <= key_b, (off_a, off_b)
    assert len({p for _, p in places}) > len(keys) // 2  # the place part really varies


def test_keys_by_line_and_by_time_grow_too() -> None:
    lines = [identity_digest("r", "n", "f", f"l{i}", 0, "timer") for i in (9, 10, 11, 200)]
    assert lines == sorted(lines)
    times = ["2026-11-29T14:11:09.5", "2026-11-29T14:11:09.75", "2026-11-29T14:11:10.000"]
    by_time = [identity_digest("r", "n", "f", f"t{t}", 0, "step") for t in times]
    assert by_time == sorted(by_time)
    gpus = [identity_digest("r", "n", "", f"g{g}@{times[0]}", 0, "gpu") for g in (0, 1)]
    assert gpus[0] != gpus[1]  # same time, another GPU: the identity part tells them apart


def test_records_of_one_place_get_distinct_keys() -> None:
    one_line = {identity_digest("r", "n", "f", "o500", sub, kind)
                for sub in range(3) for kind in ("timer", "step")}  # fmt: skip
    assert len(one_line) == 6
    odd = identity_digest("r", "n", "f", "o" + "9" * 40, 0, "timer")  # beyond 64 bits
    assert len(odd) == KEY_BYTES


def test_a_place_the_key_holds_exactly_keys_alike_by_either_way() -> None:
    head = source_head("r", "n", "f")
    for form, number in (("o", 0), ("o", 8641), ("l", 186), ("l", MAX_PLACE - 1)):
        made = place_key(head, form, number, 2, "timer")
        assert made == identity_digest("r", "n", "f", f"{form}{number}", 2, "timer")
        assert made[8:16] == number.to_bytes(8, "big")
    assert place_key(head, "o", 5, 0, "timer") != place_key(head, "l", 5, 0, "timer")
    # places the second part cannot hold: the whole identity's digest, still apart
    odd = {identity_digest("r", "n", "f", pos, 0, "timer") for pos in ("o-5", "o5", "o05", "o")}
    assert len(odd) == 4
    huge = [identity_digest("r", "n", "f", f"o{MAX_PLACE + i}", 0, "timer") for i in (0, 1)]
    assert huge[0] != huge[1] and huge[0][8:16] == huge[1][8:16]
