"""Where a job's output begins in a log: the launcher's and the engine's start-up lines.

The step clock (``dsmon.parse.base.StepClock``) numbers steps by counting timer lines, so it
must know where a launch starts: before any timer line, such a line means step 1 is next
(the log begins with the run, not in the middle); after timer lines, a launcher starting a
job means the job was started again into the same log (docs/step-assignment.md).
"""

from __future__ import annotations

from dsmon.parse.lines import LogLine

#: The logger of the line ``dsmon run`` writes at the head of a job's output
#: (``collectors.job.run_start_line``): the job's output begins there.
RUN_START_LOGGER = "dsmon"
#: How the line ``dsmon run`` writes after the job's output begins (``collectors.job.run_end_line``):
#: the job ended, with its exit status. It starts nothing.
RUN_END_TEXT = "dsmon run: the job ended with status"
#: Loggers whose lines start a job (``is_start``, ``is_relaunch``).
START_LOGGERS = frozenset({"runner.py", "launch.py", RUN_START_LOGGER})
_START_TEXTS = ("DeepSpeed info:", "Initializing TorchBackend", "DeepSpeedEngine configuration")
#: torchrun's warning as it starts the workers (``W1204 ... torch/distributed/run.py:874]
#: Setting OMP_NUM_THREADS environment variable for each process ...``): its logger and words.
_TORCHRUN_START, _TORCHRUN_LOGGER = "Setting OMP_NUM_THREADS", "torch/distributed/run.py"
_END_TEXTS = ("Process ", "Killing subprocess")
#: What DeepSpeed's launchers say as they start a job: ``runner.py``'s ``cmd = ...`` and
#: ``launch.py``'s ``WORLD INFO DICT: ...`` (every release since 0.3).
_LAUNCH_TEXTS = ("cmd = ", "WORLD INFO DICT")


def is_start(line: LogLine) -> bool:
    """Launcher or engine-init output: the log begins with the run, not in the middle.

    The launcher also speaks at the end of a run (``Process N exits successfully``, ``Killing
    subprocess``), which says nothing about where the log starts.
    """
    text = line.text
    if line.logger in START_LOGGERS:
        return (
            not text.startswith(_END_TEXTS)
            and "exits with return code" not in text
            and not text.startswith(RUN_END_TEXT)
        )
    return text.startswith(_START_TEXTS) or _torchrun_start(line)


def is_relaunch(line: LogLine) -> bool:
    """A launcher starting a job after training began: the job was started again.

    Only a launcher's first words count (DeepSpeed's, ``dsmon run``'s, torchrun's). A script
    may build a second engine mid-run, whose ``DeepSpeed info:`` starts no new count, and a
    launcher also speaks as it kills a failed job's processes, perhaps before another node's
    last timer line. The first test is cheap because it runs on every line of a training log.
    """
    logger = line.logger
    if logger is None:
        return False
    if logger == RUN_START_LOGGER:
        return not line.text.startswith(RUN_END_TEXT)
    return (logger in START_LOGGERS and line.text.startswith(_LAUNCH_TEXTS)) or _torchrun_start(
        line
    )


def _torchrun_start(line: LogLine) -> bool:
    """The warning torchrun prints as it starts the workers (its glog header taken off)."""
    return line.logger == _TORCHRUN_LOGGER and line.text.startswith(_TORCHRUN_START)
