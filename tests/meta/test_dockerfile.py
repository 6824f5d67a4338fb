"""The Dockerfile, parsed with the ``dockerfile`` package.

Checked: the stages (wheels built, then a node's install and the full one on top, the
README's way, into the base with no compiler), a build behind a TLS-intercepting proxy, a
non-root user, a HEALTHCHECK that really tells a live ingest server from a dead one, ports
equal to the commands' defaults, and that every dsmon command the images or the Kubernetes
manifests run exists and accepts its flags. tests/system/test_k8s_pod.py builds both images
with Podman (scripts/containers.sh) and runs them as the manifests say.
"""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_support import (
    DSMON_EXE,
    ROOT,
    Stage,
    Target,
    containers,
    dsmon_argv,
    exec_form,
    parse_dockerfile,
    pod_spec,
    target,
    workloads,
)

from cli import main as cli
from cli import ui_server
from dsmon.serve.run import DEFAULT_PORT as INGEST_PORT
from dsmon.serve.run import start_ingest_server

#: Packages that build native code; none may be installed in an image.
BUILD_TOOLS = re.compile(
    r"\b(gcc|g\+\+|clang|cc|make|cmake|build-essential|[\w.+-]+-dev|rustc|cargo|git)\b"
)
#: The images: the full one (the default target, the last stage) and the collector's.
TARGETS = ["runtime", "collector"]


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile()


@pytest.fixture(scope="module")
def runtime(stages: list[Stage]) -> Target:
    assert stages[-1].name == "runtime", "the full image is the default (last) target"
    return target(stages, "runtime")


@pytest.fixture(scope="module")
def collector(stages: list[Stage]) -> Target:
    return target(stages, "collector")


@pytest.fixture(scope="module", params=TARGETS)
def image(request: pytest.FixtureRequest, stages: list[Stage]) -> Target:
    return target(stages, request.param)


def apt_packages(stage: Stage | Target) -> set[str]:
    """The packages ``apt-get install`` adds in a stage."""
    found: set[str] = set()
    for m in re.finditer(r"apt-get install ([^&;]*)", stage.run_text()):
        found |= {w for w in m.group(1).replace("\\", " ").split() if not w.startswith("-")}
    return found


def install_run(t: Target) -> list[str]:
    """The RUN commands of a target that pip-install dsmon."""
    return [c.value[0] for c in t.all("RUN") if "pip install" in c.original]


def test_wheels_built_then_a_nodes_install_and_the_full_one_on_it(
    stages: list[Stage], runtime: Target, collector: Target
) -> None:
    build = stages[0]
    assert [s.name for s in stages] == ["build", "system", "collector-venv", "collector", "runtime"]
    assert build.base == runtime.base == collector.base == "python:3.11-slim-bookworm"
    assert collector.names == ["system", "collector-venv", "collector"]
    assert runtime.names == ["system", "collector-venv", "runtime"]
    # The build stage turns the checkout (the full install) into wheels, with a pip of its
    # own: Debian's python3.11 has none, the official image's Python has.
    assert "python -m venv /opt/pip" in build.run_text()
    assert "/opt/pip/bin/pip wheel --no-cache-dir --wheel-dir /wheels '.[all]'" in build.run_text()
    assert [c.value for c in build.all("COPY")] == [(".", ".")]
    # A node's install, then the rest of the full one on the same venv: the README's way.
    (node,) = [c for c in stages[2].all("RUN")]
    assert "--mount=type=bind,from=build,source=/wheels,target=/wheels" in node.flags
    assert "python -m venv /opt/dsmon" in node.value[0]
    pip = "/opt/dsmon/bin/pip install --no-cache-dir --no-index --find-links=/wheels"
    assert install_run(collector) == [node.value[0]]
    assert f"{pip} 'dsmon[collector]'" in node.value[0]
    (full,) = stages[-1].all("RUN")
    assert "--mount=type=bind,from=build,source=/wheels,target=/wheels" in full.flags
    assert f"{pip} 'dsmon[all]'" in full.value[0]
    assert runtime.env()["PATH"].startswith("/opt/dsmon/bin:")


def test_pip_builds_behind_a_tls_intercepting_proxy(stages: list[Stage]) -> None:
    """A CA bundle and pip's settings as build secrets: in no layer, optional."""
    (wheels,) = [c for c in stages[0].all("RUN") if "pip wheel" in c.original]
    assert "--mount=type=secret,id=ca-bundle" in wheels.flags
    assert "--mount=type=secret,id=pip.conf,target=/etc/pip.conf" in wheels.flags
    assert (
        "if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi"
        in " ".join(wheels.value[0].split())
    )
    assert "--secret id=ca-bundle,src=" in (ROOT / "Dockerfile").read_text()


def test_images_have_no_build_tools(image: Target) -> None:
    # Built from the base, never from the build stage (which has the compiler).
    assert "build" not in image.names and image.base == "python:3.11-slim-bookworm"
    assert "build-essential" in apt_packages(parse_dockerfile()[0])
    assert apt_packages(image) == {"tini"}
    assert not BUILD_TOOLS.search(image.run_text().replace("build,", "")), image.run_text()
    # Only the wheels' digest list is copied from the build stage; the wheels are mounted.
    copied = [c.value for c in image.all("COPY") if any("--from" in f for f in c.flags)]
    assert copied == [("/wheels.sha256", "/usr/share/dsmon/wheels.sha256")]


def test_images_run_as_a_non_root_numeric_user(image: Target) -> None:
    user = image.last("USER").value[0]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0, user
    assert gid.isdigit() and int(gid) != 0, user
    assert f"--uid {uid}" in image.run_text() and f"--gid {gid}" in image.run_text()
    # Everything is installed as root before the user is set: dsmon cannot change its venv.
    order = [c.cmd for c in image.commands]
    assert order.index("USER") > max(i for i, cmd in enumerate(order) if cmd == "RUN")


def test_ports_are_the_commands_defaults(runtime: Target, collector: Target) -> None:
    exposed = {int(p.split("/")[0]) for c in runtime.all("EXPOSE") for p in c.value}
    assert exposed == {ui_server.DEFAULT_PORT, INGEST_PORT} == {8501, 8502}
    assert not collector.all("EXPOSE")  # a collector serves nothing


def test_volumes_hold_the_store_and_the_logs(image: Target) -> None:
    volumes = {v for c in image.all("VOLUME") for v in c.value}
    assert volumes == {"/data", "/logs"}
    env = image.env()
    assert env["DSMON_STORE"] == "/data/dsmon.sqlite"
    assert env["XDG_STATE_HOME"] == "/data/state"
    assert "install -d -o dsmon -g dsmon /data /logs" in image.run_text()


@pytest.mark.slow  # a real process
def test_default_commands(runtime: Target, collector: Target) -> None:
    for t in (runtime, collector):
        assert exec_form(t.last("ENTRYPOINT")) == ["tini", "--", "dsmon"]
    assert exec_form(runtime.last("CMD")) == ["dashboard", "--address", "0.0.0.0", "--no-browser"]
    # The collector image run bare says how to use it.
    argv = exec_form(collector.last("CMD"))
    assert argv == ["collect", "--help"]
    assert subprocess.run([DSMON_EXE, *argv], capture_output=True).returncode == 0


def healthcheck_code(runtime: Target) -> str:
    (check,) = runtime.all("HEALTHCHECK")
    assert check.json, "HEALTHCHECK CMD must be exec form (no shell in the check)"
    kind, exe, opt, code = check.value
    assert (kind, exe, opt) == ("CMD", "python", "-c")
    for option in ("--interval=", "--timeout=", "--start-period=", "--retries="):
        assert any(f.startswith(option) for f in check.flags), option
    return str(code)


def run_check(code: str, url: str | None) -> int:
    env = {"PATH": str(Path(sys.executable).parent)}
    if url is not None:
        env["DSMON_HEALTH_URL"] = url
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True).returncode


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_healthcheck_targets_the_ingest_health_endpoint(runtime: Target, collector: Target) -> None:
    code = healthcheck_code(runtime)
    assert healthcheck_code(collector) == code
    assert "urllib.request" in code and "DSMON_HEALTH_URL" in code
    assert runtime.env()["DSMON_HEALTH_URL"] == f"http://127.0.0.1:{INGEST_PORT}/healthz"
    # A collector serves no HTTP: its image turns the check off.
    assert collector.env()["DSMON_HEALTH_URL"] == ""


@pytest.mark.slow  # a real process
def test_healthcheck_passes_on_a_live_server_and_fails_on_a_dead_one(
    runtime: Target, tmp_path: Path
) -> None:
    code = healthcheck_code(runtime)
    with start_ingest_server(str(tmp_path / "s.sqlite"), "t" * 32, "127.0.0.1", 0) as srv:
        assert run_check(code, f"{srv.url}/healthz") == 0
    assert run_check(code, f"http://127.0.0.1:{closed_port()}/healthz") != 0
    # The collector image sets DSMON_HEALTH_URL= (empty): nothing to check, healthy.
    assert run_check(code, "") == 0


def dsmon_invocations() -> list[tuple[str, list[str]]]:
    """Every dsmon argv the image and the manifests run, with where it comes from."""
    runtime = parse_dockerfile()[-1]
    found = [("Dockerfile CMD", exec_form(runtime.last("CMD")))]  # the collector's: --help
    for obj in workloads():
        for c in containers(pod_spec(obj)):
            argv = dsmon_argv(c)
            if argv is not None:
                found.append((f"{obj['kind']}/{obj['metadata']['name']}/{c['name']}", argv))
    return found


def test_the_manifests_run_dsmon_in_each_role() -> None:
    subcommands = sorted(argv[0] for _, argv in dsmon_invocations())
    assert subcommands == ["collect", "dashboard", "dashboard", "probe", "serve"]


@pytest.mark.slow  # starts a dsmon process
@pytest.mark.parametrize(
    ("where", "argv"), [pytest.param(w, a, id=w) for w, a in dsmon_invocations()]
)
def test_every_dsmon_command_run_exists_and_parses(where: str, argv: list[str]) -> None:
    res = subprocess.run([DSMON_EXE, argv[0], "--help"], capture_output=True, text=True)
    assert res.returncode == 0, f"{where}: dsmon {argv[0]} --help: {res.stderr}"
    # Every flag the image or a manifest passes is one the command accepts.
    try:
        args = cli.build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"{where}: dsmon {shlex.join(argv)} does not parse")
    assert callable(args.func)


def dockerignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """(excluded, regex) per .dockerignore line, in order: the last match decides."""
    rules = []
    for raw in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        rx = re.escape(pattern).replace(r"\*\*/", "(?:.*/)?").replace(r"\*", "[^/]*")
        rules.append((not negated, re.compile(rx)))
    return rules


def in_context(path: str) -> bool:
    """Whether Docker sends ``path`` to the build (a pattern matches a path or its parents)."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    verdict = False
    for excluded, rx in dockerignore_rules():
        if any(rx.fullmatch(p) for p in prefixes):
            verdict = excluded
    return not verdict


def test_dockerignore_sends_what_pip_install_reads_and_nothing_else() -> None:
    needed = ["pyproject.toml", "README.md", "app.py", ".streamlit/config.toml"]
    needed += [str(p.relative_to(ROOT)) for p in (ROOT / "pages").glob("*.py")]
    for package in ("dsmon", "collectors", "ui"):
        needed += [str(p.relative_to(ROOT)) for p in (ROOT / package).rglob("*.py")]
    needed += [str(p.relative_to(ROOT)) for p in (ROOT / "dsmon" / "data").rglob("*")]
    missing = [p for p in needed if "__pycache__" not in p and not in_context(p)]
    assert not missing, f".dockerignore keeps these from the build: {missing}"
    for kept_out in ("tests/meta/test_dockerfile.py", ".venv/bin/python", "dsmon.sqlite", ".git/HEAD",
                     "artifacts/screenshots/steps.png", "dsmon/__pycache__/cli.cpython-311.pyc",
                     "docs/records.md", "deploy/k8s/kustomization.yaml", "bench/x.py"):  # fmt: skip
        assert not in_context(kept_out), kept_out


def test_dockerignore_covers_every_file_pyproject_packages() -> None:
    """A new data-files entry or package in pyproject.toml must be let into the context too."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    for source in re.findall(r'"share/dsmon[^"]*" = \[([^\]]*)\]', text):
        for glob in re.findall(r'"([^"]+)"', source):
            files = list(ROOT.glob(glob))
            assert files, glob
            assert all(in_context(str(f.relative_to(ROOT))) for f in files), glob
    for pattern in re.findall(r"include = \[([^\]]*)\]", text):
        for name in re.findall(r'"(\w+)\*"', pattern):
            assert in_context(f"{name}/__init__.py"), name
