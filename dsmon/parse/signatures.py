"""Each kind of DeepSpeed or Megatron line told by its own tokens, wherever the line puts them.

The line cleaner (:mod:`dsmon.parse.lines`) takes off the prefixes it knows: DeepSpeed's logger
header, launcher tags, ``[Rank N]``. Real logs carry others: a training script's own logger
(ezpz's ``[2024-04-21 02:45:08][INFO][training:1251] - ``, loguru's ``2024-04-21 02:45:08.123 |
INFO | mod:fn:12 - ``, ``logging.basicConfig``'s ``INFO:root:``), a job runner's stamp, a
hostname the cleaner could not tell from a word. Rather than learn every header, a line that
no parser took is searched for the distinctive start of a known kind (:data:`SIGNATURES`);
what stands before it is a prefix, and the line is offered again from there
(``LogParser._dispatch``). A line that carries a signature but that no parser takes even then is
counted as unparsed under the signature's kind, so nothing DeepSpeed printed is lost silently.

Signatures are the tokens a kind's parser itself requires, so a look-alike stays apart as it
does when it starts the line: GPT-NeoX's and Megatron's own timers and activation
checkpointing's one-field lines are told apart by their names in ``timers.classify``, the
monitor-memory form of the throughput line has no ``SamplesPerSec=``.
"""

from __future__ import annotations

import re
from dataclasses import replace

from dsmon.parse.base import contains_any
from dsmon.parse.lines import LogLine, valid_date, valid_time

#: Kind (the unparsed-count bucket, as the kind's parser names it) and the tokens that start
#: such a line. Whether a kind is *counted* when nothing reads it: see :data:`QUIET`.
SIGNATURES: tuple[tuple[str, str], ...] = (
    ("timer", r"(?:rank=\d+ )?time \(ms\) \| ?[A-Za-z0-9_][\w .\-/]*: "),
    ("step", r"step=\d+, skipped=\d+, lr="),
    (
        "throughput",
        r"(?:epoch=\d+/micro_step=\d+/global_step=\d+|(?<![\d/.])\d+/\d+), "
        r"(?:RunningAvg)?SamplesPerSec=",
    ),
    ("megatron_iteration", r"(?<![\w-])iteration\s*[=:]?\s*\d+\s*/\s*\d+\s*\|"),
    ("memory", r"\((?:after|before) \d+ iterations?\) memory \((?:B|KB|MB|GB)\)"),
    ("megatron_timers", r"\(min, max\) time across ranks \((?:ms|s)\):"),
    ("iteration", r"steps: \d+ loss: "),
    (
        "loss_scale",
        r"\[(?:deepspeed|deepscale)\] (?:OVERFLOW!|fp16 dynamic loss scale overflow!"
        r"|setting loss scale from)"
        r"|Overflow detected\. Skipping step\.|Grad overflow on iteration"
        r"|(?:Reducing|Increasing) dynamic loss scale from|Using static loss scale of"
        r"|Consecutive hysteresis is enabled\.|No Grad overflow for \d+ iterations"
        r"|Current loss scale already at minimum",
    ),
    ("comm_op", r"(?:rank=\d+\s*\|\s*)?comm op: [A-Za-z_]"),
    ("flops_profile", r"-{5,} (?:DeepSpeed )?Flops Profiler -{5,}"),
    ("memory", r"MA \d+(?:\.\d+)? GB\s+Max_MA "),
    ("trainer", r"\{'(?:loss|eval_loss|train_runtime)': .*'epoch': "),
    ("pipeline_stage", r"RANK=\d+ STAGE=\d+ LAYERS=\d+ "),
    ("deepspeed_version", r"DeepSpeed info: version="),
    ("zero_stage", r"Creating \S+ ZeRO stage \d optimizer"),
    ("optimizer", r"DeepSpeed (?:Basic|Final) Optimizer = "),
)
#: Kinds read when found behind a prefix, but not counted when no parser takes them: their
#: lines carry no figure of the run's progress (a version line a fork rewords, a bare
#: ``(min, max)`` head whose rows are counted on their own).
QUIET = frozenset({"megatron_timers", "deepspeed_version", "zero_stage", "optimizer"})

#: Words one of which every signature holds: the quick test before the regex, since this
#: runs for every line no parser took (most lines of a chatty log).
_WORDS = (
    "time (ms)",
    "step=",
    "SamplesPerSec=",
    "iteration",
    "(min, max)",
    "steps: ",
    "OVERFLOW",
    "verflow",
    "loss scale",
    "hysteresis",
    "comm op: ",
    "Flops Profiler",
    "Max_MA",
    "'epoch': ",
    "STAGE=",
    "DeepSpeed info",
    "ZeRO stage",
    "Optimizer = ",
)
_ANY = re.compile("|".join(f"(?P<k{i}>{rx})" for i, (_, rx) in enumerate(SIGNATURES)))
_KINDS = {f"k{i}": kind for i, (kind, _) in enumerate(SIGNATURES)}
#: ``[Rank N] `` (log_dist) or the 2020 engine's ``rank:N `` right before the message.
_RANK = re.compile(r"(?:\[Rank (-?\d+)\]|(?<![\w])rank[:=](\d+)) ?$")
_STAMP = re.compile(
    r"(?P<date>\d{4}-\d\d-\d\d)[ T_](?P<time>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d{1,9}))?"
    r"|(?P<us_date>\d\d/\d\d/\d{4}) (?P<us_time>\d\d:\d\d:\d\d)"
)
_LEVEL = re.compile(r"(?<![A-Za-z])(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)(?![A-Za-z])")


def find(text: str) -> tuple[str, int] | None:
    """The kind of the first signature in ``text`` and where it starts, or None."""
    if not contains_any(text, _WORDS):
        return None
    m = _ANY.search(text)
    if m is None or m.lastgroup is None:
        return None
    return _KINDS[m.lastgroup], m.start()


def counted(kind: str) -> bool:
    """Whether a line of this kind that no parser reads is counted as unparsed."""
    return kind not in QUIET


def behind(line: LogLine, at: int) -> LogLine:
    """The line from ``at`` on, with what its prefix says: time, level, ``[Rank N]``.

    The prefix is anyone's logger header, so only what is unambiguous is read from it: a
    date and time (``2024-04-21 02:45:08`` with or without fractions, ``04/21/2024 02:45:08``),
    a level word, and a ``[Rank N]`` (or ``rank:N``) right before the message. What the line already knew
    (a DeepSpeed header's time, a launcher's rank) stays.
    """
    prefix = line.text[:at]
    out = replace(line, text=line.text[at:])
    m = _RANK.search(prefix)
    if m is not None and out.rank is None:
        out.rank = int(m.group(1) or m.group(2))
    if out.ts is None and out.bad_ts is None:
        stamp = _STAMP.search(prefix)
        if stamp is not None:
            _set_stamp(out, stamp)
    if out.level is None:
        level = _LEVEL.search(prefix)
        if level is not None:
            out.level = "WARNING" if level.group(1) == "WARN" else level.group(1)
    return out


def _set_stamp(out: LogLine, m: re.Match[str]) -> None:
    """The prefix's time as ISO-8601 with milliseconds, or ``bad_ts`` for one that cannot be."""
    if m.group("date") is not None:
        date, time = m.group("date"), m.group("time")
        frac = (m.group("frac") or "")[:3].ljust(3, "0")
    else:
        month, day, year = m.group("us_date").split("/")
        date, time, frac = f"{year}-{month}-{day}", m.group("us_time"), "000"
    if valid_date(date) and valid_time(time):
        out.ts = f"{date}T{time}.{frac}"
    else:
        out.bad_ts = f"{date} {time}"
