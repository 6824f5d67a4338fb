"""What each release reads (dsmon.ds_config.releases), against facts checked in its source.

Every expectation here was read by hand in the release sources of
``scripts/deepspeed_releases.py``'s cache (the file and line are named), so a generator that
misreads a release fails here. The generator itself is re-run against the cache when the cache
is on this machine (slow).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from locations import ROOT

from dsmon.ds_config import names, schema
from dsmon.ds_config.releases import DATA, knowledge

CACHE = Path.home() / ".cache" / "dsmon" / "deepspeed"


def test_coverage() -> None:
    k = knowledge()
    assert len(k.releases) == 125
    assert (k.releases[0], k.releases[-1]) == ((0, 3, 1), (0, 19, 8))
    assert schema.LATEST_KNOWN == (0, 19, 8)
    assert len(k.keys) > 400


def test_versions_between_releases_are_judged_as_the_one_before() -> None:
    k = knowledge()
    assert k.judged_as((0, 10, 1)) == (0, 10, 1)
    assert k.judged_as((0, 6, 2)) == (0, 6, 1)  # 0.6.2 was never on PyPI
    assert k.judged_as((0, 20, 0)) == (0, 19, 8)
    assert k.judged_as(schema.PRE_RELEASE) == (0, 3, 1)
    assert k.judged_as(None) == (0, 19, 8)


def test_one_bit_optimizers_end_at_0196() -> None:
    # runtime/config.py DEEPSPEED_OPTIMIZERS: ONEBIT_ADAM_OPTIMIZER from 0.3.1, ZERO_ONE_ADAM
    # from 0.6.1, ONEBIT_LAMB from 0.3.16; all three gone from 0.19.7
    assert names.optimizer_releases("OneBitAdam") == "0.3.1-0.19.6"
    assert names.optimizer_releases("zerooneadam") == "0.6.1-0.19.6"
    assert names.optimizer_releases("OneBitLamb") == "0.3.16-0.19.6"
    assert names.optimizer_releases("FusedAdamW") is None
    assert names.ds_optimizers((0, 19, 8)) == (
        "adagrad", "adam", "adamw", "lamb", "lion", "muadam", "muadamw", "muon", "musgd",
    )  # fmt: skip
    assert "muon" not in names.ds_optimizers((0, 17, 5))  # MUON_OPTIMIZER from 0.17.6
    assert names.ds_schedulers((0, 12, 2)) == (
        "LRRangeTest",
        "OneCycle",
        "WarmupDecayLR",
        "WarmupLR",
    )
    assert "WarmupCosineLR" in names.ds_schedulers((0, 12, 3))


def test_defaults_that_changed() -> None:
    d = schema.default_for
    assert (d("gradient_clipping", (0, 19, 2)), d("gradient_clipping", (0, 19, 3))) == (0.0, 1.0)
    assert (d("steps_per_print", (0, 15, 1)), d("steps_per_print", (0, 15, 2))) == (10, None)
    assert d("bf16.check_grad_overflow", (0, 19, 2)) is False
    assert d("bf16.check_grad_overflow", (0, 19, 3)) is True
    assert d("bfloat16.check_grad_overflow", (0, 19, 3)) is True  # the old spelling
    # 0.3.x started the fp16 scaler at 2^32 (FP16_INITIAL_SCALE_POWER_DEFAULT = 32)
    assert (d("fp16.initial_scale_power", (0, 7, 7)), d("fp16.initial_scale_power", None)) == (
        32,
        16,
    )
    assert d("zero_optimization.stage3_prefetch_bucket_size") == 50_000_000
    assert d("zero_optimization.model_persistence_threshold") == 2**63 - 1  # sys.maxsize


def test_keys_come_and_go() -> None:
    k = knowledge()
    assert not k.exists("log_level", (0, 19, 2)) and k.exists("log_level", (0, 19, 3))
    assert k.first_last("compile") == ((0, 13, 2), (0, 19, 8))
    assert not k.exists("compile", (0, 15, 0))  # torch.compile config left in 0.14.4
    assert k.exists("compile.deepcompile", (0, 16, 6))
    assert k.exists("zero_optimization.zero_quantized_weights", (0, 10, 0))
    assert not k.exists("zero_optimization.zero_quantized_weights", (0, 9, 5))
    assert not k.exists("sparse_attention", (0, 19, 7))


def test_strict_sections_and_refused_keys() -> None:
    k = knowledge()
    assert k.strict_since("zero_optimization") == (0, 7, 0)  # pydantic, extra="forbid"
    assert k.strict_since("fp16") == (0, 17, 1)
    assert not k.strict("activation_checkpointing", None)  # read with dict.get
    section = schema.section("zero_optimization", None)
    assert section is not None and section.strict and section.pydantic
    assert section.aliases["stage3_prefetch_bucket_size"] == "prefetch_bucket_size"
    # runtime/config.py _REMOVED_TOP_LEVEL_CONFIG_KEYS (0.19.7: nebula, sparse_attention...;
    # 0.19.8 adds amp, elasticity...): deepspeed.initialize raises DeepSpeedConfigError
    assert k.refused("amp", (0, 19, 8)) is not None and k.refused("amp", (0, 19, 7)) is None
    assert "issues/8489" in (k.refused("nebula", (0, 19, 7)) or "")
    assert k.refused("zero_optimization.mics_shard_size", (0, 19, 7)) is not None
    assert k.deprecated_for("zero_optimization.cpu_offload", None) == (
        "zero_optimization.offload_optimizer"
    )


def test_allgather_bucket_is_ignored_by_zero12_from_0124() -> None:
    # runtime/utils.py all_gather_dp_groups returns through all_gather_into_tensor first
    k = knowledge()
    assert k.ignored_since("zero_optimization.allgather_bucket_size") == (0, 12, 4)
    assert k.ignored("zero_optimization.allgather_bucket_size", (0, 12, 3)) is None


def test_invented_keys_are_in_no_release() -> None:
    """The seeds' look-alike keys: no release reads them, anywhere in the config."""
    k = knowledge()
    every_key = {path.rpartition(".")[2] for path in k.keys}
    for key in names.INVENTED:
        assert key not in every_key, key
    assert not k.ever("torch_compile") and not k.ever("heterogeneous_config")
    for real in names.CONFUSIONS.values():
        assert real in every_key, real


def test_data_file_is_what_the_loader_reads() -> None:
    doc = json.loads(DATA.read_text())
    assert doc["releases"][-1] == "0.19.8"
    assert "scripts/ds_config_knowledge.py" in doc["about"]


@pytest.mark.slow
@pytest.mark.skipif(not CACHE.is_dir(), reason="no DeepSpeed release cache on this machine")
def test_generator_output_is_committed() -> None:
    """Re-reading every cached release gives the committed file, byte for byte."""
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "ds_config_knowledge.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
