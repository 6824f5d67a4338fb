"""``dsmon check``: the checklist in the terminal and as JSON, exit codes, unreadable input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from health_support import SEEDS, corpus_dir
from locations import DATA

from cli.demo import demo_dir
from cli.main import main
from dsmon.health import Checklist, HealthInputs, RunFacts, Status, evaluate
from dsmon.health.report import exit_code
from dsmon.load.files import import_paths
from dsmon.store.store import open_store


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["check", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_config_with_warnings_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, str(corpus_dir("z3_overlap_true") / "ds_config.json"))
    assert code == 1 and err == ""
    assert out.splitlines()[0] == (
        f"dsmon check: {corpus_dir('z3_overlap_true') / 'ds_config.json'} - DeepSpeed unknown "
        f"(judged as 0.19.8), config: {corpus_dir('z3_overlap_true') / 'ds_config.json'} (file)"
    )
    assert "WARN  optimizer.fused  A fused optimizer runs the step" in out
    assert (
        out.rstrip().splitlines()[-1]
        == "Summary: 0 fail, 1 warn, 16 unknown, 17 pass, 16 n/a -> warn"
    )


def test_run_folder_with_a_failure_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, str(corpus_dir("fp16_zero2")))
    assert code == 2
    assert " - DeepSpeed 0.19.8, 2 rank(s) on 1 node(s), cpu, config: " in out.splitlines()[0]
    lines = out.splitlines()
    i = lines.index("FAIL  loss_scale.skipped  Few optimizer steps are skipped for overflow")
    assert lines[i + 2] == "      - skipped steps = 4 (step line at step 25)"
    assert "      fix (json):" in lines[i : i + 8]


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--json", str(corpus_dir("crash_step17")))
    doc = json.loads(out)
    assert code == doc["exit_code"] == 2
    assert doc["status"] == "fail"
    assert doc["facts"]["deepspeed_version"] == "0.19.8" and doc["facts"]["world_size"] == 2
    errors = next(r for r in doc["results"] if r["id"] == "run.errors")
    assert errors["status"] == "fail" and errors["page"] == "steps"
    # the first to die, then each error event with its file and line
    assert errors["evidence"][0]["label"] == "rank 0 died first"
    assert errors["evidence"][2]["label"] == "traceback (rank 0)"
    assert sum(doc["counts"].values()) == len(doc["results"]) == 50
    # the run's state heads the document, as it heads the text
    assert doc["state"]["state"] == "crashed" and doc["state"]["cause"] == "run.errors"
    assert doc["state"]["exit_code"] == 1 and doc["state"]["detail"].startswith("rank 0 died first")


def test_all_pass_exits_0(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = {
        "train_batch_size": 32,
        "train_micro_batch_size_per_gpu": 4,
        "steps_per_print": 10,
        "log_level": "info",
        "wall_clock_breakdown": True,
        "flops_profiler": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
        "zero_optimization": {"stage": 3},
    }
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(cfg))
    code, out, _ = run_cli(capsys, str(path))
    assert code == 0
    assert "WARN" not in out and "FAIL" not in out


def test_explicit_config_with_a_log_uses_the_log_facts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys,
        "--format",
        "json",
        str(SEEDS / "seed004_heterogeneous.json"),
        str(corpus_dir("z0") / "train.log"),
    )
    doc = json.loads(out)
    keys = next(r for r in doc["results"] if r["id"] == "schema.keys")
    assert keys["status"] == "fail"
    assert {"label": "judged against DeepSpeed", "value": "0.19.8", "where": ""} in keys["evidence"]
    assert doc["facts"]["config"]["source"].endswith("seed004_heterogeneous.json")
    assert code == 2


def test_invalid_json_is_one_line_with_position(capsys: pytest.CaptureFixture[str]) -> None:
    path = SEEDS / "seed004_heterogeneous_as_printed.json"
    code, out, err = run_cli(capsys, str(path))
    assert (code, out) == (2, "")
    assert err == f"dsmon: cannot read {path}: line 2 column 1: not JSON: Expecting ',' delimiter\n"


def test_not_a_ds_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "package.json"
    path.write_text('{"name": "x", "version": "1.0.0"}')
    code, _, err = run_cli(capsys, str(path))
    assert code == 2
    assert err == (
        f"dsmon: cannot read {path}: not a DeepSpeed config: none of its keys "
        "(name, version) is a DeepSpeed option\n"
    )


def test_missing_input_and_nothing_to_check(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "no/such/train.log")
    assert (code, err) == (2, "dsmon: cannot read no/such/train.log: No such file or directory\n")
    code, _, err = run_cli(capsys)
    assert code == 2 and err.startswith("dsmon: check: nothing to check")


def test_store_mode_agrees_with_file_mode(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = str(tmp_path / "s.sqlite")
    store = open_store(url)
    import_paths(store, [corpus_dir("fp16_zero2")])
    store.close()
    code, out, _ = run_cli(capsys, "--json", "--store", url, "--run", "fp16_zero2")
    stored = {r["id"]: r for r in json.loads(out)["results"]}
    _, out, _ = run_cli(capsys, "--json", str(corpus_dir("fp16_zero2")))
    files = {r["id"]: r for r in json.loads(out)["results"]}
    assert code == 2
    # Live (the store) or not (the files), the launcher's exit lines say the run finished.
    assert (
        stored["run.stalled"]["summary"] == "the launcher reported the workers' exit: run finished"
    )
    assert {k: (v["status"], v["summary"]) for k, v in stored.items()} == {
        k: (v["status"], v["summary"]) for k, v in files.items()
    }
    code, _, err = run_cli(capsys, "--store", url, "--run", "nope")
    assert (
        code == 2 and err == f"dsmon: cannot read run nope: not in store {url} (runs: fp16_zero2)\n"
    )


def test_a_folders_config_file_yields_to_what_the_run_printed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """tests/data/hf_trainer_info: ds_config.json says "auto"; the log's config dump holds the
    values the Trainer filled in. Folder and store read the same config: the run's."""
    folder = DATA / "hf_trainer_info"
    _, out, _ = run_cli(capsys, "--json", str(folder))
    doc = json.loads(out)
    assert doc["facts"]["config"] == {"source": "train.log", "origin": "user_json"}
    files = {r["id"]: (r["status"], r["summary"]) for r in doc["results"]}
    assert files["batch.arithmetic"] == ("pass", "batch keys agree")
    url = str(tmp_path / "s.sqlite")
    with open_store(url) as store:
        import_paths(store, [folder])
    _, out, _ = run_cli(capsys, "--json", "--store", url)
    assert {r["id"]: (r["status"], r["summary"]) for r in json.loads(out)["results"]} == files
    _, out, _ = run_cli(capsys, "--json", str(folder / "ds_config.json"), str(folder))
    named = json.loads(out)  # a config named on the command line still wins
    assert named["facts"]["config"]["origin"] == "file"


# The bundled demo run (ZeRO-2, fp32, 2 CPU ranks, no scheduler): these rules check something
# the run does not use or has no data of, so they must not be counted as passes.
DEMO_NOT_APPLICABLE = {
    "schema.scheduler",  # no scheduler section
    "zero3.max_live_parameters",  # stage 2
    "zero3.prefetch_bucket_size",
    "zero3.param_persistence_threshold",
    "zero3.sub_group_size",
    "fp16.loss_scaler",  # fp32
    "fp16.zeropp_quantized_gradients",
    "precision.bf16",  # CPU run
    "zero.overlap_comm",  # CPU run: the CPU accelerator has no streams to overlap on
    "zeropp.hpz_nodes",
    "compile.zero3_act_ckpt",
    "act_ckpt.settings",
    "loss_scale.collapse",
    "flops.mfu",
    "gpu.utilization",
    "gpu.balance",
    "gpu.memory",
    "gpu.throttling",
    "gpu.errors",
    "ranks.straggler",  # a log alone: no per-rank probe data
    "ranks.input_bound",
    "ranks.hang",
    "zero3.coordinator",  # no coordinator timer lines (DeepSpeed 0.10.0 only)
    "network.compression",  # one node
    "zero3.fragmentation",  # stage 2
    "loss.finite",  # no iteration lines count NaNs
}


def test_not_applicable_is_not_a_pass(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--json", str(demo_dir()))
    doc = json.loads(out)
    by_status: dict[str, set[str]] = {}
    for r in doc["results"]:
        by_status.setdefault(r["status"], set()).add(r["id"])
    assert by_status["n/a"] == DEMO_NOT_APPLICABLE
    # steps.regression passes: the last 8 steps are slower than 54 % of the earlier ones
    # (p = 0.39), where the last 6 against the whole run's median once warned at 1.2x
    assert doc["counts"] == {"pass": 22, "warn": 1, "fail": 0, "unknown": 1, "n/a": 26}
    assert code == doc["exit_code"] == 1
    code, out, _ = run_cli(capsys, str(demo_dir()))
    lines = out.splitlines()
    assert lines[1] == (
        "Run state: finished: exit status 0 (the launcher: 2 worker(s) exited successfully)"
    )
    assert lines[-1] == "Summary: 0 fail, 1 warn, 1 unknown, 22 pass, 26 n/a -> warn"
    assert "N/A   gpu.errors  No ECC or XID errors" in lines
    assert lines[lines.index("N/A   gpu.errors  No ECC or XID errors") + 1] == (
        "      CPU run (no GPUs)"
    )
    last_pass = max(i for i, line in enumerate(lines) if line.startswith("PASS  "))
    first_na = min(i for i, line in enumerate(lines) if line.startswith("N/A   "))
    assert last_pass < first_na


def test_nothing_applicable_exits_0() -> None:
    # A checklist of rules that do not apply has nothing wrong (and nothing passing).
    checklist = Checklist(
        tuple(
            r
            for r in evaluate(HealthInputs(facts=RunFacts(device="cpu"))).results
            if r.status is Status.NOT_APPLICABLE
        )
    )
    # the GPU rules and MFU on a CPU run, the probe rules, coordinator timers, nodes, NaN
    # counts, the state of a run there is none of, unread lines (no output read), input time
    assert len(checklist.results) == 14
    assert checklist.status is Status.NOT_APPLICABLE and exit_code(checklist) == 0


def test_nothing_to_check_in_the_input_is_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Each of these used to print 40 "unknown" verdicts and exit 0: nothing was checked.
    empty = tmp_path / "empty_run"
    empty.mkdir()
    code, out, err = run_cli(capsys, str(empty))
    assert (code, out) == (2, "")
    assert err == f"dsmon: cannot read {empty}: no DeepSpeed config or log found in folder\n"
    binary = tmp_path / "train.log"
    binary.write_bytes(Path(sys.executable).read_bytes()[:4096])  # an ELF/Mach-O/PE header
    code, out, err = run_cli(capsys, "--json", str(binary))
    assert (code, out) == (2, "")
    assert err == (
        f"dsmon: cannot read {binary}: not text (a binary file, not a DeepSpeed log or config)\n"
    )
    notes = empty / "notes.txt"  # a folder of files that are not DeepSpeed output
    notes.write_text("results to follow\n")
    code, _, err = run_cli(capsys, str(empty))
    assert (code, err) == (
        2,
        f"dsmon: cannot read {empty}: no DeepSpeed config or log found in folder\n",
    )
    code, _, err = run_cli(capsys, str(notes))  # named explicitly, it is read as a log
    assert (code, err) == (
        2,
        f"dsmon: cannot read {notes}: no DeepSpeed output found in file (no line dsmon reads)\n",
    )
    blank = tmp_path / "ds_config.json"
    blank.write_text("\n")
    code, out, err = run_cli(capsys, str(blank))
    assert (code, out, err) == (
        2,
        "",
        f"dsmon: cannot read {blank}: empty file: nothing to check\n",
    )
    code, _, err = run_cli(capsys, str(corpus_dir("z0")), str(tmp_path / "z0_typo"))
    assert (code, err) == (
        2,
        f"dsmon: cannot read {tmp_path / 'z0_typo'}: No such file or directory\n",
    )
