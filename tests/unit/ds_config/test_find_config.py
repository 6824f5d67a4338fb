"""Which file a run's config is, whatever its name; and where its csv_monitor writes.

On real logs: ``tests/data/probe_slow_data/train.log`` (``dsmon run``'s first line and
DeepSpeed's launcher lines name ``--deepspeed_config ds_config.json``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from locations import DATA

from dsmon.ds_config.find import config_in, find_config, named_in_log
from dsmon.ds_config.outputs import csv_monitor_globs

LOG = DATA / "probe_slow_data" / "train.log"


def test_the_launch_lines_name_the_config() -> None:
    lines = LOG.read_text().splitlines()
    assert named_in_log(lines) == "ds_config.json"
    launcher_only = [ln for ln in lines if "spawned with command" in ln]
    assert launcher_only and named_in_log(launcher_only) == "ds_config.json"
    runner_only = [ln for ln in lines if "runner.py" in ln and "cmd = " in ln]
    assert runner_only and named_in_log(runner_only) == "ds_config.json"
    assert named_in_log(["[train_tiny] step 1 loss 1.0"]) is None
    assert config_in(["train.py", "--deepspeed", "--deepspeed_config=z2.json"]) == "z2.json"


def test_a_config_of_any_name_is_found_from_the_launch_command(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    text = LOG.read_text().replace("ds_config.json", "ds_default.json")
    log.write_text(text)
    (tmp_path / "ds_default.json").write_text(
        (DATA / "probe_slow_data" / "ds_config.json").read_text()
    )
    (tmp_path / "other.json").write_text(
        json.dumps({"train_batch_size": 1, "fp16": {}, "bf16": {}})
    )
    found = find_config(log)
    assert found is not None and found.path == tmp_path / "ds_default.json"
    assert found.how == "named by the launch command in train.log"


def test_without_a_launch_command_the_json_that_reads_as_a_config_is_taken(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("[train_tiny] step 1 loss 1.0\n")
    (tmp_path / "results.json").write_text(json.dumps({"accuracy": 0.9}))
    (tmp_path / "zero2.json").write_text(
        json.dumps({"train_batch_size": 8, "zero_optimization": {"stage": 2}})
    )
    (tmp_path / "broken.json").write_text("{")
    found = find_config(log)
    assert found is not None and found.path.name == "zero2.json"
    assert "reads as a DeepSpeed config" in found.how
    (tmp_path / "zero2.json").unlink()
    assert find_config(log) is None


def test_a_relative_name_is_looked_for_in_the_jobs_folder_too(tmp_path: Path) -> None:
    logs, job = tmp_path / "logs", tmp_path / "job"
    logs.mkdir()
    job.mkdir()
    shutil.copy(LOG, logs / "train.log")
    shutil.copy(DATA / "probe_slow_data" / "ds_config.json", job / "ds_config.json")
    found = find_config(logs / "train.log", [job])
    assert found is not None and found.path == job / "ds_config.json"


def test_csv_monitor_writes_under_its_output_path_and_job_name(tmp_path: Path) -> None:
    on = {"csv_monitor": {"enabled": True, "output_path": "monitor/", "job_name": "tiny"}}
    assert csv_monitor_globs(on, [tmp_path]) == [str(tmp_path / "monitor" / "tiny" / "*.csv")]
    defaults = {"csv_monitor": {"enabled": True}}
    assert csv_monitor_globs(defaults, [tmp_path]) == [str(tmp_path / "DeepSpeedJobName" / "*.csv")]
    absolute = {"csv_monitor": {"enabled": "true", "output_path": str(tmp_path / "m")}}
    assert csv_monitor_globs(absolute, [Path("/elsewhere")]) == [
        str(tmp_path / "m" / "DeepSpeedJobName" / "*.csv")
    ]
    assert csv_monitor_globs({"csv_monitor": {"enabled": False}}, [tmp_path]) == []
    assert csv_monitor_globs({}, [tmp_path]) == []
