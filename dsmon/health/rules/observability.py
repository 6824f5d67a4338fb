"""Config rules for what DeepSpeed prints: dsmon can only judge what the run lets it see.

Recent DeepSpeed releases print much less by default: since 0.15.2 ``steps_per_print`` has no
default (no ``step=`` or throughput lines), since 0.17.6 the workers log at WARNING (no step,
throughput, config-dump or OVERFLOW lines), and the timer breakdown needs
``wall_clock_breakdown``. A checklist that silently shows UNKNOWN everywhere would be useless,
so these rules name the switch that makes each signal appear.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from dsmon.ds_config import schema
from dsmon.ds_config.effective import ConfigView
from dsmon.ds_config.read import as_float
from dsmon.ds_config.releases import knowledge
from dsmon.health import measures as m
from dsmon.health.inputs import HealthInputs
from dsmon.health.model import Evidence, Finding, Status
from dsmon.health.registry import rule
from dsmon.health.verdicts import fix_json, needs_config, not_applicable
from dsmon.parse.base import OUT_OF_RANGE
from dsmon.parse.unparsed import UNPARSED

_VERBOSE_LEVELS = {"info", "debug"}
#: Events parsed from lines the engine logs at INFO in each worker (not the launcher), the
#: surest first: some early versions print() their version line.
_WORKER_INFO_EVENTS = ("optimizer", "zero_stage", "zero_init", "deepspeed_version")


@rule(
    "observe.wall_clock_breakdown",
    "Step-time breakdown is logged",
    "wall_clock_breakdown (or the flops profiler, which implies it) prints fwd/bwd/step "
    "timers every step: the data behind the step and communication charts. dsmon run's "
    "per-rank probe gives them on every rank without it.",
    "config",
)
@needs_config
def check_wall_clock(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Warn when no timer breakdown will be printed."""
    wcb = cfg.get("wall_clock_breakdown")
    fp = cfg.get("flops_profiler.enabled")
    ev = (Evidence.of(wcb), Evidence.of(fp))
    if cfg.flag(wcb.path) is True:
        return Finding(Status.PASS, "wall_clock_breakdown is on (timers add a device sync)", ev)
    if cfg.enabled("flops_profiler"):
        return Finding(Status.PASS, "the flops profiler turns the timer breakdown on", ev)
    if inputs.has_rows("heartbeat") or inputs.has_rows("rank_step"):  # dsmon run's probe
        return Finding(
            Status.PASS,
            "wall_clock_breakdown is off, but the per-rank probe (dsmon run) times fwd/bwd/step "
            "and the collectives on every rank, without DeepSpeed's device syncs",
            ev,
        )
    return Finding(
        Status.WARN,
        "no fwd/bwd/step breakdown: dsmon cannot chart step time or the communication share",
        ev,
        fix_json({"wall_clock_breakdown": True}),
    )


@rule(
    "observe.steps_per_print",
    "Progress and throughput lines are printed",
    "steps_per_print drives the step= and samples/sec lines; it has had no default since "
    "DeepSpeed 0.15.2 (it was 10 before), so unset means no such lines at all. Accelerate "
    "(the Hugging Face Trainer's) sets it to inf: the rule does not apply there.",
    "config",
)
@needs_config
def check_steps_per_print(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Warn when steps_per_print is unset on a version where that silences progress lines."""
    s = cfg.get("steps_per_print")
    ev = (Evidence.of(s), Evidence("DeepSpeed version", inputs.facts.version_label))
    if m.trainer_formats(inputs):
        return not_applicable(
            "Accelerate (under the Hugging Face Trainer) sets steps_per_print to inf whatever "
            "the config says: DeepSpeed prints no step= or throughput lines, and the Trainer's "
            "log dicts carry the loss and learning rate every logging_steps",
            *ev,
        )
    # JSON has no inf: a config read from the engine or a dump holds the word DeepSpeed printed
    if s.value == "inf" or as_float(s.value) == math.inf:
        return not_applicable(
            "steps_per_print is inf (Accelerate sets it so whatever the config says): DeepSpeed "
            "prints no step= or throughput lines; the training script's own output or dsmon "
            "run's per-rank probe has to give the step times",
            *ev,
        )
    if s.value is not None:
        return Finding(Status.PASS, f"progress lines every {s.value} steps", ev)
    return Finding(
        Status.WARN,
        "steps_per_print unset: no step= or throughput lines (no default since 0.15.2)",
        ev,
        fix_json({"steps_per_print": 10}),
    )


@rule(
    "observe.log_level",
    "DeepSpeed's INFO lines reach the log",
    "From 0.17.6 the workers log at WARNING, hiding step=, throughput, config-dump and "
    'OVERFLOW lines; "log_level": "info" (0.19.3+) or set_log_level_from_string brings them back.',
    "config",
)
@needs_config
def check_log_level(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Warn when INFO lines will be hidden, with the fix that works for the version."""
    version = cfg.version
    level = cfg.get("log_level")
    default = schema.by_version(schema.LOGGER_DEFAULT_LEVEL, version)
    ev = (
        Evidence.of(level),
        Evidence("DeepSpeed version", inputs.facts.version_label),
        Evidence("workers' default level", default),
    )
    if not inputs.frame("step").empty:
        return Finding(Status.PASS, "step= lines are in the log: INFO output is visible", ev)
    seen = _worker_info_line(inputs)
    if seen is not None:  # what the log shows beats what the version implies
        return Finding(Status.PASS, f"the workers' INFO lines are in the log: {seen}", ev)
    supported = knowledge().exists("log_level", version)
    if supported and str(level.value).lower() in _VERBOSE_LEVELS:
        return Finding(Status.PASS, f"log_level {level.value}", ev)
    if default == "info" and not (supported and level.explicit):
        return Finding(
            Status.PASS, f"DeepSpeed {inputs.facts.version_label} logs INFO by default", ev
        )
    if supported:
        return Finding(
            Status.WARN,
            "DeepSpeed >= 0.17.6 logs at WARNING: step=, throughput, "
            "config-dump and OVERFLOW lines are hidden",
            ev,
            fix_json({"log_level": "info"}),
        )
    fix = (
        "from deepspeed.utils.logging import set_log_level_from_string\n"
        'set_log_level_from_string("info")  # before deepspeed.initialize'
    )
    return Finding(
        Status.WARN,
        f"DeepSpeed {inputs.facts.version_label} logs at WARNING and "
        "has no log_level key (0.19.3+): raise the level in code",
        ev,
        fix,
        "python",
    )


def _worker_info_line(inputs: HealthInputs) -> str | None:
    """A line the training processes log at INFO, when the log holds one, with its place.

    The launcher logs at INFO whatever the workers do, so its lines prove nothing; these
    come from the engine in each worker. A 2020 log's version line (``version=2.1``, before
    DeepSpeed's public numbering) would otherwise be read as a version that hides them.
    """
    events = inputs.frame("event")
    if events.empty or "name" not in events.columns:
        return None
    for name in _WORKER_INFO_EVENTS:
        hits = events[events["name"] == name]
        if not hits.empty:
            first = hits.iloc[0]
            return f"{str(first['message'])[:80]} ({first['file']}:{first['line']})"
    return None


@rule(
    "observe.flops_profiler",
    "The flops profiler measures one step",
    "flops_profiler.enabled profiles a single step (profile_step): the achieved FLOPS that "
    "MFU is computed from. Off is a choice, not a fault: the rule says what it would add, and "
    "warns only when a profile was asked for and the run went past its step without one.",
    "config",
)
@needs_config
def check_flops_profiler(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Pass when a profile is (or will be) taken; n/a when off; warn when one went missing."""
    on = cfg.get("flops_profiler.enabled")
    step = cfg.get("flops_profiler.profile_step")
    ev = (Evidence.of(on), Evidence.of(step))
    if not cfg.enabled("flops_profiler"):
        if inputs.facts.device == "cpu":
            return not_applicable(
                "off, and a CPU run has no GPU peak to turn a profile into MFU", *ev
            )
        return not_applicable(
            'off: no MFU. To measure it once, a short run with "flops_profiler": '
            '{"enabled": true, "profile_step": 10} profiles one step',
            *ev,
        )
    if inputs.has_rows("flops_profile"):
        return Finding(Status.PASS, f"flops profile taken at step {step.value}", ev)
    at = as_float(step.value)
    last = _last_step(inputs)
    if at is not None and last is not None and last > at:
        output = cfg.section("flops_profiler").get("output_file")
        where = (
            f"it writes to {output}: follow that file (dsmon collect --profile-file)"
            if output
            else "the log shows none (rank 0 prints it at INFO)"
        )
        return Finding(
            Status.WARN,
            f"the run reached step {last} but no flops profile of step {step.value} arrived: "
            f"{where}",
            (*ev, Evidence("latest step", last)),
        )
    return Finding(Status.PASS, f"flops profiler at step {step.value}", ev)


def _last_step(inputs: HealthInputs) -> int | None:
    """The newest optimizer step the run timed (engine timers, iterations, the probe...)."""
    series = m.step_times(inputs)
    covered = series.steps if series is not None else None
    return covered[1] if covered else None


@rule(
    "observe.comms_logger",
    "The comms logger is used knowingly",
    "comms_logger gives per-collective latency and bandwidth, but synchronizes after every "
    "collective (distorting overlap) and is switched on by the section's mere presence.",
    "config",
)
@needs_config
def check_comms_logger(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Pass without it (timers suffice); warn on the enabled:false trap and verbose output."""
    if not cfg.has("comms_logger"):
        return Finding(
            Status.PASS,
            "off: dsmon takes the comm share from the timers; enable it "
            "for one diagnostic run to see per-op bandwidth",
            (Evidence("comms_logger", "absent"),),
        )
    enabled = cfg.get("comms_logger.enabled")
    verbose = cfg.get("comms_logger.verbose")
    ev = (Evidence.of(enabled), Evidence.of(verbose))
    if not cfg.enabled("comms_logger"):
        return Finding(
            Status.WARN,
            "comms_logger.enabled is false but the section's presence "
            "turns logging on (DeepSpeed checks 'comms_logger' in config)",
            ev,
            "delete the comms_logger section to turn it off",
            "text",
        )
    note = "; verbose prints one line per collective" if cfg.flag(verbose.path) is True else ""
    return Finding(
        Status.PASS,
        f"on: it synchronizes every collective, so overlap looks worse than it is{note}",
        ev,
    )


# --- What dsmon could not read of the run's output -------------------------------------------
# (kept apart from the config rules above: it judges the log, not the config)

#: Kinds of unread line as the checklist names them.
_UNREAD_NAMES = {
    "megatron_iteration": "Megatron iteration",
    "iteration": "pipeline-engine progress",
    "timer": "timer",
    "step": "step=",
    "throughput": "throughput",
    "loss_scale": "loss-scale",
    "flops_profile": "flops-profiler",
    "comm_op": "comms-logger",
    "comm_summary": "comms-summary",
    "memory": "memory",
    "trainer": "Trainer log",
    "pipeline_stage": "pipeline-stage",
}


#: Record kinds only a log (or the probe) gives: without any, no output was read.
_LOG_KINDS = ("event", "timer", "step", "throughput", "iteration", "loss_scale", "memory",
              "comm_op", "flops_profile", "heartbeat")  # fmt: skip


@rule(
    "observe.unread_lines",
    "Every DeepSpeed line of the run was read",
    "A line that carries the tokens of a kind dsmon reads (an iteration, timer, step, "
    "throughput, loss-scale, comms or flops-profiler line) but that it could not read is "
    "counted: its figures are missing from every chart and check, and the first such line "
    "is shown so the format can be reported.",
    "runtime",
)
def check_unread_lines(inputs: HealthInputs) -> Finding:
    """Warn with the count per kind and the first line when lines of a known kind went unread."""
    counts, first = unread_lines(inputs)
    if not counts and not any(inputs.has_rows(kind) for kind in _LOG_KINDS):
        return not_applicable("no DeepSpeed output was read (a config alone is judged)")
    if not counts:
        return Finding(Status.PASS, "no line of a kind dsmon reads went unread")
    total = sum(counts.values())
    kinds = ", ".join(f"{_UNREAD_NAMES.get(k, k)} {n}" for k, n in counts.items())
    ev = tuple(Evidence(f"{_UNREAD_NAMES.get(k, k)} lines not read", n) for k, n in counts.items())
    return Finding(
        Status.WARN,
        f"{total} line(s) of the run's output could not be read ({kinds}); the first: {first}",
        (*ev, Evidence("first line not read", first)),
    )


def unread_lines(inputs: HealthInputs) -> tuple[dict[str, int], str]:
    """Lines not read per kind, over the run's files, and the first one (``file:line: text``).

    The log parser tells each kind's count as it grows (``dsmon.parse.unparsed``): the newest,
    largest count of a file is that file's.
    """
    events = inputs.frame("event")
    if events.empty or "name" not in events.columns:
        return {}, ""
    rows = events[events["name"] == UNPARSED]
    per_file: dict[tuple[str, str, str], int] = {}
    first = ""
    for _, row in rows.iterrows():
        detail = row["detail"]
        if not isinstance(detail, Mapping) or not isinstance(detail.get("count"), int):
            continue
        if detail.get("kind") == OUT_OF_RANGE:  # a value left out of a read line: not a line
            continue
        key = (str(row.get("node") or ""), str(row.get("file") or ""), str(detail.get("kind")))
        per_file[key] = max(per_file.get(key, 0), detail["count"])
        first = first or str(detail.get("first") or "")
    counts: dict[str, int] = {}
    for (_, _, kind), n in per_file.items():
        counts[kind] = counts.get(kind, 0) + n
    return dict(sorted(counts.items(), key=lambda kv: -kv[1])), first
