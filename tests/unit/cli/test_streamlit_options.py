"""The Streamlit settings the dashboard runs with: real options, the same in both places.

``dsmon dashboard`` passes its settings on Streamlit's command line (an installed dsmon has
no ``.streamlit/config.toml`` beside it); a checkout also has them in that file. A setting
misspelled in either would be ignored or stop Streamlit from starting, and the two could
drift apart: the forced garbage collection after every script run, for one, must be off in
both (``cli/ui_server.py`` says why).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from locations import ROOT
from streamlit import config

from cli.ui_server import streamlit_command


def command_options() -> dict[str, str]:
    """``--section.option value`` pairs of the dashboard's ``streamlit run`` command line."""
    cmd = streamlit_command(Path("app.py"), 8501, "127.0.0.1")
    flags = cmd[cmd.index("run") + 2 :]
    pairs = zip(flags[::2], flags[1::2], strict=True)  # an odd count: a flag with no value
    return {flag.removeprefix("--"): value for flag, value in pairs}


def file_options() -> dict[str, object]:
    """The options of the checkout's ``.streamlit/config.toml``, as ``section.option``."""
    with (ROOT / ".streamlit" / "config.toml").open("rb") as f:
        sections = tomllib.load(f)
    return {f"{s}.{k}": v for s, opts in sections.items() for k, v in opts.items()}


def test_every_option_given_is_one_streamlit_has() -> None:
    known = config.get_config_options()  # every option Streamlit defines, by name
    unknown = [name for name in [*command_options(), *file_options()] if name not in known]
    assert not unknown


def test_the_command_line_and_the_config_file_agree() -> None:
    given, written = command_options(), file_options()
    for name in ("server.headless", "server.fileWatcherType", "runner.postScriptGC"):
        assert name in given and name in written, name
        assert given[name] == str(written[name]).lower(), name


def test_no_forced_collection_after_each_run() -> None:
    assert command_options()["runner.postScriptGC"] == "false"
    assert file_options()["runner.postScriptGC"] is False
