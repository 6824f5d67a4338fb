"""Where a DeepSpeed config makes the run write files besides its log: csv_monitor's series.

With ``csv_monitor`` enabled DeepSpeed's engine writes the learning rate, the loss scale (fp16)
and, with ``wall_clock_breakdown``, its timers every step (the loss too before 0.18.3, and the
pipeline engine's still) to one CSV file per series, in ``<output_path>/<job_name>/`` (defaults ``""`` and ``DeepSpeedJobName``),
relative to the job's working folder. ``dsmon run`` and ``dsmon watch`` follow those files
as they grow. The TensorBoard and Weights & Biases monitors write formats dsmon does not
read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dsmon.ds_config.read import section, section_enabled

#: csv_monitor's defaults (DeepSpeed's ``CSVConfig``).
DEFAULT_OUTPUT_PATH = ""
DEFAULT_JOB_NAME = "DeepSpeedJobName"


def csv_monitor_globs(config: Mapping[str, Any], roots: Sequence[Path]) -> list[str]:
    """Globs of the CSV files ``config``'s csv_monitor writes, under each working folder.

    ``roots``: where the job may have run (a relative ``output_path`` is its working
    folder's); none when the config does not enable csv_monitor.
    """
    if not section_enabled(config, "csv_monitor"):
        return []
    csv = section(config, "csv_monitor")
    output = str(csv.get("output_path") or DEFAULT_OUTPUT_PATH)
    job = str(csv.get("job_name") or DEFAULT_JOB_NAME)
    folders = (
        [Path(output) / job] if Path(output).is_absolute() else [r / output / job for r in roots]
    )
    out: list[str] = []
    for folder in folders:
        pattern = str(folder.resolve() / "*.csv")
        if pattern not in out:
            out.append(pattern)
    return out
