"""Helpers for the deployment tests: the Dockerfile's stages and the Kubernetes manifests.

Both are parsed here, and the checks hold the files to the code they launch (ports,
subcommands, flags); tests/system/test_k8s_pod.py builds the images and runs the pods.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dockerfile
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
K8S = ROOT / "deploy" / "k8s"
#: The image names the manifests use for dsmon (kustomization.yaml maps them to a
#: registry): the full image, and the Dockerfile's collector target.
DSMON_IMAGES = {"dsmon", "dsmon-collector"}
#: The console script of the venv running the tests.
DSMON_EXE = str(Path(sys.executable).parent / "dsmon")


@dataclass
class Stage:
    """One ``FROM`` stage of the Dockerfile: its base image, name and instructions."""

    base: str
    name: str | None
    commands: list[dockerfile.Command] = field(default_factory=list)

    def all(self, cmd: str) -> list[dockerfile.Command]:
        """The instructions ``cmd`` (upper case) of this stage, in order."""
        return [c for c in self.commands if c.cmd == cmd]

    def last(self, cmd: str) -> dockerfile.Command:
        """The last instruction ``cmd`` of this stage (the one that counts)."""
        found = self.all(cmd)
        assert found, f"stage {self.name or self.base} has no {cmd}"
        return found[-1]

    def env(self) -> dict[str, str]:
        """Every ``ENV`` of the stage (the parser gives key, value, key, value, ...)."""
        out: dict[str, str] = {}
        for c in self.all("ENV"):
            out.update(zip(c.value[::2], c.value[1::2], strict=True))
        return out

    def run_text(self) -> str:
        """The commands of every ``RUN`` of the stage, whitespace runs collapsed, one a line."""
        return "\n".join(" ".join(c.value[0].split()) for c in self.all("RUN"))


def parse_dockerfile(path: Path = DOCKERFILE) -> list[Stage]:
    """The stages of ``path``, with global ``ARG`` defaults substituted into ``FROM``."""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for c in dockerfile.parse_file(str(path)):
        if c.cmd == "ARG" and not stages:
            key, _, default = c.value[0].partition("=")
            args[key] = default
        elif c.cmd == "FROM":
            image = c.value[0]
            for key, default in args.items():
                image = image.replace("${" + key + "}", default).replace("$" + key, default)
            name = c.value[2] if len(c.value) == 3 and c.value[1].upper() == "AS" else None
            stages.append(Stage(image, name))
        elif stages:
            stages[-1].commands.append(c)
    return stages


@dataclass
class Target:
    """A build target: its stage and the stages it starts from, outermost first.

    What an image built with ``--target NAME`` holds is the instructions of this chain: the
    ``ENV``, ``USER`` or ``HEALTHCHECK`` of a stage it starts from count as its own.
    """

    stages: list[Stage]

    @property
    def base(self) -> str:
        """The image the chain starts from (the Dockerfile's base, not one of its stages)."""
        return self.stages[0].base

    @property
    def names(self) -> list[str | None]:
        return [s.name for s in self.stages]

    @property
    def commands(self) -> list[dockerfile.Command]:
        return [c for s in self.stages for c in s.commands]

    def all(self, cmd: str) -> list[dockerfile.Command]:
        return [c for s in self.stages for c in s.all(cmd)]

    def last(self, cmd: str) -> dockerfile.Command:
        found = self.all(cmd)
        assert found, f"target {self.stages[-1].name} has no {cmd}"
        return found[-1]

    def env(self) -> dict[str, str]:
        return {k: v for s in self.stages for k, v in s.env().items()}

    def run_text(self) -> str:
        return "\n".join(s.run_text() for s in self.stages if s.all("RUN"))


def target(stages: list[Stage], name: str) -> Target:
    """The chain of stages ``docker build --target name`` builds into the image."""
    by_name = {s.name: s for s in stages if s.name}
    chain = [by_name[name]]
    while chain[0].base in by_name:
        chain.insert(0, by_name[chain[0].base])
    return Target(chain)


def exec_form(c: dockerfile.Command) -> list[str]:
    """The argv of an ENTRYPOINT/CMD (exec form required: shell form would hide signals)."""
    assert c.json, f"{c.cmd} must use the exec (JSON) form: {c.original}"
    return list(c.value)


#: libyaml's safe loader where PyYAML was built with it: the pure-Python one took seconds
#: of the fast lane for the manifests the Kubernetes checks read again and again.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def yaml_documents(text: str) -> list[Any]:
    """The documents of a YAML stream, empty ones left out."""
    return [d for d in yaml.load_all(text, Loader=YAML_LOADER) if d is not None]


def load_manifests(root: Path = K8S) -> dict[Path, list[dict[str, Any]]]:
    """Every YAML document under ``root``, by file (kustomization files included)."""
    return {p: yaml_documents(p.read_text(encoding="utf-8")) for p in sorted(root.rglob("*.yaml"))}


def resources(root: Path = K8S) -> list[dict[str, Any]]:
    """The Kubernetes objects (kustomization and patch files excluded) under ``root``."""
    return [
        doc
        for path, docs in load_manifests(root).items()
        if path.name != "kustomization.yaml" and path.parent.name == "base"
        for doc in docs
    ]


def one(kind: str, root: Path = K8S) -> dict[str, Any]:
    """The single object of ``kind`` among the base manifests."""
    found = [r for r in resources(root) if r["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod spec of a workload (Deployment, Job, ...)."""
    return dict(obj["spec"]["template"]["spec"])


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Init containers (sidecars included) and containers of a pod spec."""
    return list(spec.get("initContainers", [])) + list(spec.get("containers", []))


def workloads(root: Path = K8S) -> Iterator[dict[str, Any]]:
    """The objects that run pods."""
    return (r for r in resources(root) if "template" in r.get("spec", {}))


def dsmon_argv(container: dict[str, Any]) -> list[str] | None:
    """The ``dsmon`` argument list a container runs, or None if it does not run dsmon.

    The image's entrypoint is ``tini -- dsmon``, so a dsmon container's ``args`` are the
    subcommand and its flags; an explicit ``command`` naming dsmon is read the same way.
    """
    command = list(container.get("command", []))
    args = [str(a) for a in container.get("args", [])]
    if command:
        words = shlex.split(" ".join(command)) if len(command) == 1 else command
        if Path(words[0]).name != "dsmon":
            return None
        return words[1:] + args
    image = str(container["image"]).rsplit("/", 1)[-1].split(":")[0]
    return args if image in DSMON_IMAGES else None


def flag(argv: list[str], name: str) -> str | None:
    """The value of ``--name V`` or ``--name=V`` in ``argv`` (the last one), or None."""
    value = None
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif word.startswith(name + "="):
            value = word.split("=", 1)[1]
    return value


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A container's ``env`` entries by name."""
    return {e["name"]: e for e in container.get("env", [])}
