"""The user docs (README.md, docs/*.md) against the code they describe.

Every flag of every command and every DSMON_* variable the code reads is in the
configuration reference; every dsmon command line in a code block parses with the real
parser; every link and anchor resolves; every JSON example is valid JSON; the screenshots
the README shows exist and are small.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path

import pytest
from locations import ROOT

from cli import main as cli

DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]
CONFIG_DOC = ROOT / "docs" / "configuration.md"
#: Where the code reads environment variables (the image's HEALTHCHECK included).
CODE = [*(ROOT / "dsmon").rglob("*.py"), *(ROOT / "collectors").rglob("*.py"), ROOT / "app.py"]
CODE += [*(ROOT / "cli").rglob("*.py"), *(ROOT / "pages").glob("*.py"), ROOT / "Dockerfile"]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def section(text: str, command: str) -> str:
    """The part of configuration.md under the heading of ``dsmon COMMAND``."""
    m = re.search(rf"^### `dsmon {command}`\n(.*?)(?=^#)", text, re.DOTALL | re.MULTILINE)
    assert m, f"configuration.md has no section for dsmon {command}"
    return m.group(1)


@pytest.mark.parametrize("command", sorted(subcommands()))
def test_configuration_reference_lists_every_flag(command: str) -> None:
    text = section(CONFIG_DOC.read_text(encoding="utf-8"), command).replace("\\|", "|")
    for action in subcommands()[command]._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        names = action.option_strings or [action.metavar or action.dest]
        for name in names:
            assert f"`{name}" in text, f"dsmon {command}: {name} is not documented"


def test_configuration_reference_lists_every_environment_variable() -> None:
    read = set()
    for path in CODE:
        read |= set(re.findall(r"\bDSMON_[A-Z_]+\b", path.read_text(encoding="utf-8")))
    assert {"DSMON_STORE", "DSMON_TOKEN", "DSMON_HEALTH_URL"} <= read
    text = CONFIG_DOC.read_text(encoding="utf-8")
    missing = sorted(v for v in read if f"`{v}`" not in text)
    assert not missing, f"not in docs/configuration.md: {missing}"


def code_blocks(path: Path, lang: str) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return re.findall(rf"^ *```{lang}\n(.*?)^ *```", text, re.DOTALL | re.MULTILINE)


def dsmon_command_lines() -> list[tuple[str, list[str]]]:
    """Every ``dsmon ...`` invocation in the docs' shell blocks, as argv after ``dsmon``."""
    found = []
    for page in PAGES:
        for block in code_blocks(page, "(?:sh|bash)"):
            joined = re.sub(r"\\\n\s*", " ", block)
            for line in joined.splitlines():
                for words in simple_commands(line):
                    if Path(words[0]).name == "dsmon":
                        found.append((f"{page.name}: {shlex.join(words)}", words[1:]))
    return found


def simple_commands(line: str) -> list[list[str]]:
    """The commands of a shell line, split at ``&&``, ``;``, ``|`` and ``&`` outside quotes."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split, lex.commenters = True, "#"
    commands: list[list[str]] = [[]]
    for token in lex:
        if token and set(token) <= set("&;|()"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def test_docs_show_dsmon_commands() -> None:
    shown = {argv[0] for _, argv in dsmon_command_lines() if argv}
    assert {"demo", "watch", "serve", "dashboard", "collect", "import"} <= shown


@pytest.mark.parametrize(
    ("where", "argv"), [pytest.param(w, a, id=w[:60]) for w, a in dsmon_command_lines()]
)
def test_every_documented_command_line_parses(where: str, argv: list[str]) -> None:
    try:
        cli.build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"{where}: does not parse")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {slug(h) for h in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_and_anchors_resolve(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        assert dest.exists(), f"{page.name}: broken link {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{page.name}: no heading for #{anchor} in {file}"


def test_slug_matches_github() -> None:
    assert slug("What to put in ds_config.json") == "what-to-put-in-ds_configjson"
    assert slug("`/metrics`") == "metrics"
    assert slug("PostgreSQL store") == "postgresql-store"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_json_examples_are_valid(page: Path) -> None:
    for block in code_blocks(page, "json"):
        json.loads(block)


def test_readme_screenshots_exist_and_are_small() -> None:
    shots = re.findall(r"!\[[^\]]*\]\((docs/screenshots/[^)]+)\)", (ROOT / "README.md").read_text())
    names = {Path(s).stem for s in shots}
    assert names == {"steps", "communication", "gpus", "flops", "health", "training"}
    for shot in shots:
        png = ROOT / shot
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", shot
        assert png.stat().st_size < 300_000, f"{shot} is {png.stat().st_size} bytes"


def test_recommended_ds_config_is_the_one_deployed() -> None:
    """docs/ds-config.md's example and deploy/k8s/base/ds_config.json ask for the same output."""
    (example,) = [json.loads(b) for b in code_blocks(ROOT / "docs" / "ds-config.md", "json")][:1]
    deployed = json.loads((ROOT / "deploy" / "k8s" / "base" / "ds_config.json").read_text())
    for key in ("steps_per_print", "log_level", "wall_clock_breakdown"):
        assert example[key] == deployed[key], key
    profiler = {k: v for k, v in example["flops_profiler"].items() if k != "output_file"}
    assert profiler.items() <= deployed["flops_profiler"].items()
    assert "comms_logger" not in deployed  # its cost: a sync after every collective


def test_health_rules_list_matches_the_registry() -> None:
    """docs/health.md lists every registered rule, in order, under its category, and no other."""
    from dsmon.health.registry import all_rules

    text = (ROOT / "docs" / "health.md").read_text()
    rows = re.findall(r"^\| `([\w.]+)` \| (.*?) \|", text, re.MULTILINE)
    heading_of = {}
    for m in re.finditer(r"^## [^\n]*\((\w+)\)\n(.*?)(?=^## |\Z)", text, re.DOTALL | re.MULTILINE):
        heading_of.update(
            {rid: m.group(1) for rid in re.findall(r"^\| `([\w.]+)`", m.group(2), re.MULTILINE)}
        )
    rules = all_rules()
    assert [rid for rid, _ in rows] == [r.id for r in rules]
    assert dict(rows) == {r.id: r.title for r in rules}
    assert heading_of == {r.id: r.category for r in rules}
