"""Kubernetes pod specs run as Podman containers: what the kubelet would do, for one test.

``tests/system/test_k8s_pod.py`` runs the pods of ``deploy/k8s`` from their manifests. This
module turns a manifest's container into ``podman run`` arguments: image, command and
arguments (``$(VAR)`` expanded as Kubernetes does), environment (literal values, the downward
API and Secrets), volumes (emptyDir, configMap, persistentVolumeClaim as host folders) and the
security context (user and group, fsGroup, read-only root filesystem, no privilege escalation,
dropped capabilities, the runtime's default seccomp profile). A manifest key this module does
not know fails the test, so a new setting in the manifests cannot be left out unnoticed; the
few keys it deliberately leaves to the cluster are listed in :data:`NOT_EMULATED`.

All pods share one Podman pod with only a loopback interface, standing for the cluster
network: each Service name resolves to 127.0.0.1 there, so a Service port must equal its
target port (checked). HTTP probes run from the host in that network namespace, as the
kubelet's do. Podman runs as root with ``scripts/containers.conf`` (runc, cgroupfs).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from locations import ROOT

#: Podman's settings for this machine kind (runc, cgroupfs, no default ulimits).
CONTAINERS_CONF = ROOT / "scripts" / "containers.conf"
#: Builds (or finds) the images and names them, one ``name=image`` a line.
SCRIPT = ROOT / "scripts" / "containers.sh"

#: Keys that the cluster acts on and these containers do not: resources (no limits are set;
#: the machine is smaller than the trainer's requests), ports (one shared network), probes
#: (run by :func:`probe_passes`), restartPolicy of a sidecar (the test orders the containers).
NOT_EMULATED = {"resources", "ports", "readinessProbe", "livenessProbe", "startupProbe",
                "restartPolicy"}  # fmt: skip
CONTAINER_KEYS = {"name", "image", "command", "args", "env", "volumeMounts", "securityContext",
                  "workingDir"} | NOT_EMULATED  # fmt: skip
POD_KEYS = {"initContainers", "containers", "volumes", "securityContext", "restartPolicy",
            "automountServiceAccountToken", "terminationGracePeriodSeconds"}  # fmt: skip
SECURITY_KEYS = {"runAsNonRoot", "runAsUser", "runAsGroup", "fsGroup", "seccompProfile",
                 "allowPrivilegeEscalation", "readOnlyRootFilesystem", "capabilities"}  # fmt: skip


def podman(
    *args: str, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """One podman command with this repository's engine settings."""
    env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
    res = subprocess.run(
        ["podman", *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and res.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: {res.returncode}\n{res.stderr[-3000:]}")
    return res


def engine_missing() -> str | None:
    """Why no container can run here, or None."""
    missing = [t for t in ("podman", "buildah", "mmdebstrap") if shutil.which(t) is None]
    if missing:
        return f"no container engine ({', '.join(missing)}): apt-get install podman buildah runc mmdebstrap"
    if os.geteuid() != 0:
        return "the pod test runs rootful Podman: run it as root"
    return None


def build_images() -> dict[str, str]:
    """The manifests' image names mapped to the images ``scripts/containers.sh`` built."""
    res = subprocess.run(
        [str(SCRIPT), "images"], capture_output=True, text=True, timeout=3600, cwd=ROOT
    )
    assert res.returncode == 0, f"scripts/containers.sh images: {res.stderr[-4000:]}"
    print(res.stderr)  # what was built, and in how long
    return dict(line.split("=", 1) for line in res.stdout.split())


def image_size_mb(image: str) -> float:
    return int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout) / 1e6


def expand(text: str, env: Mapping[str, str]) -> str:
    """``$(VAR)`` replaced as Kubernetes does in command, args and env values."""

    def one(m: re.Match[str]) -> str:
        if m.group(0).startswith("$$"):
            return m.group(0)[1:]
        return env.get(m.group(1), m.group(0))

    return re.sub(r"\$?\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, text)


@dataclass
class Cluster:
    """What the API server and the kubelet hand a pod: images, Secrets, ConfigMaps, claims."""

    #: Manifest image name (without registry or tag) -> local image.
    images: dict[str, str]
    #: Secret name -> key -> value.
    secrets: dict[str, dict[str, str]]
    #: ConfigMap name -> folder holding its keys as files.
    config_maps: dict[str, Path]
    #: PersistentVolumeClaim name -> folder standing for the volume.
    claims: dict[str, Path]
    #: Downward API fieldPath -> value, for each pod by its workload's name.
    fields: dict[str, dict[str, str]]
    #: Where the pods' emptyDir volumes are made.
    scratch: Path
    #: Extra ``podman run`` arguments of a stand-in image (the test's trainer image).
    image_extras: dict[str, list[str]] = field(default_factory=dict)


def image_key(image: str) -> str:
    """``registry/path/name:tag`` -> ``name``: how the manifests name images."""
    return image.rsplit("/", 1)[-1].split("@")[0].split(":")[0]


@dataclass
class PodRun:
    """One workload's pod spec made ready to run: its volumes as host folders."""

    workload: str
    spec: dict[str, Any]
    cluster: Cluster
    volumes: dict[str, tuple[Path, bool]] = field(default_factory=dict)  # name -> (path, ro)

    def __post_init__(self) -> None:
        unknown = set(self.spec) - POD_KEYS
        assert not unknown, f"{self.workload}: pod keys not emulated: {unknown}"
        security = self.spec.get("securityContext", {})
        unknown = set(security) - SECURITY_KEYS
        assert not unknown, f"{self.workload}: securityContext keys not emulated: {unknown}"
        fs_group = security.get("fsGroup")
        for vol in self.spec.get("volumes", []):
            name = vol["name"]
            if "emptyDir" in vol:
                path = self.cluster.scratch / self.workload / name
                path.mkdir(parents=True)
                path.chmod(0o777)  # the kubelet's emptyDir mode
                self.volumes[name] = (self._owned(path, fs_group), False)
            elif "configMap" in vol:
                self.volumes[name] = (self.cluster.config_maps[vol["configMap"]["name"]], True)
            elif "persistentVolumeClaim" in vol:
                path = self.cluster.claims[vol["persistentVolumeClaim"]["claimName"]]
                self.volumes[name] = (self._owned(path, fs_group), False)
            else:
                raise AssertionError(f"{self.workload}: volume type not emulated: {vol}")

    @staticmethod
    def _owned(path: Path, fs_group: int | None) -> Path:
        """fsGroup: the volume's group, group-writable, new files inheriting it (setgid)."""
        if fs_group is not None:
            os.chown(path, -1, fs_group)
            path.chmod(path.stat().st_mode | 0o2070)
        return path

    @property
    def grace_s(self) -> int:
        return int(self.spec.get("terminationGracePeriodSeconds", 30))

    def security(self, container: dict[str, Any]) -> dict[str, Any]:
        """The pod's security context overlaid with the container's."""
        merged = {**self.spec.get("securityContext", {}), **container.get("securityContext", {})}
        unknown = set(merged) - SECURITY_KEYS
        assert not unknown, f"{container['name']}: securityContext keys not emulated: {unknown}"
        return merged

    def env(self, container: dict[str, Any]) -> dict[str, str]:
        """The container's environment as the kubelet resolves it, in order."""
        out: dict[str, str] = {}
        fields = self.cluster.fields[self.workload]
        for entry in container.get("env", []):
            name = entry["name"]
            if "value" in entry:
                out[name] = expand(str(entry["value"]), out)
            elif "fieldRef" in entry.get("valueFrom", {}):
                out[name] = fields[entry["valueFrom"]["fieldRef"]["fieldPath"]]
            elif "secretKeyRef" in entry.get("valueFrom", {}):
                ref = entry["valueFrom"]["secretKeyRef"]
                out[name] = self.cluster.secrets[ref["name"]][ref["key"]]
            else:
                raise AssertionError(f"{container['name']}: env source not emulated: {entry}")
        return out

    def run_args(self, pod: str, container: dict[str, Any], name: str) -> list[str]:
        """``podman run`` arguments (without ``run``) for one container of this pod."""
        unknown = set(container) - CONTAINER_KEYS
        assert not unknown, f"{container['name']}: container keys not emulated: {unknown}"
        image = self.cluster.images[image_key(container["image"])]
        env = self.env(container)
        args = ["--pod", pod, "--name", name, "--image-volume", "tmpfs"]
        for key, value in env.items():
            args += ["--env", f"{key}={value}"]
        for mount in container.get("volumeMounts", []):
            assert set(mount) <= {"name", "mountPath", "readOnly"}, mount
            path, ro = self.volumes[mount["name"]]
            ro = ro or bool(mount.get("readOnly"))
            args += [
                "--mount",
                f"type=bind,src={path},dst={mount['mountPath']}" + (",ro" if ro else ""),
            ]
        args += self._security_args(container, image)
        if "workingDir" in container:
            args += ["--workdir", container["workingDir"]]
        args += self.cluster.image_extras.get(image_key(container["image"]), [])
        command = [expand(str(c), env) for c in container.get("command", [])]
        if command:
            args += ["--entrypoint", json.dumps(command)]
        return [*args, image, *(expand(str(a), env) for a in container.get("args", []))]

    def _security_args(self, container: dict[str, Any], image: str) -> list[str]:
        sec = self.security(container)
        args: list[str] = []
        user, group = sec.get("runAsUser"), sec.get("runAsGroup")
        if user is not None:
            args += ["--user", f"{user}:{group}" if group is not None else str(user)]
        if sec.get("runAsNonRoot"):
            uid = user if user is not None else image_user(image)
            # The kubelet refuses to start such a container (CreateContainerConfigError).
            assert str(uid).isdigit() and int(uid) != 0, f"{container['name']}: runs as {uid!r}"
        if sec.get("fsGroup") is not None:
            args += ["--group-add", str(sec["fsGroup"])]
        if sec.get("readOnlyRootFilesystem"):
            args += ["--read-only", "--read-only-tmpfs=false"]
        if sec.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        caps = sec.get("capabilities", {})
        assert set(caps) <= {"drop", "add"}, caps
        args += [f"--cap-drop={c.lower()}" for c in caps.get("drop", [])]
        args += [f"--cap-add={c.lower()}" for c in caps.get("add", [])]
        seccomp = sec.get("seccompProfile", {"type": "RuntimeDefault"})
        assert seccomp == {"type": "RuntimeDefault"}, seccomp  # Podman's default profile
        return args


def image_user(image: str) -> str:
    """The image's ``USER`` uid (``10001:10001`` -> ``10001``; empty: root)."""
    user = podman("image", "inspect", "--format", "{{.Config.User}}", image).stdout.strip()
    return user.split(":")[0] or "0"


def container_state(name: str) -> dict[str, Any]:
    """``podman inspect``'s State of a container."""
    return dict(json.loads(podman("inspect", "--format", "{{json .State}}", name).stdout))


def process_uid_gid(name: str) -> tuple[int, int]:
    """The effective uid and gid of a running container's first process, read on the host."""
    pid = container_state(name)["Pid"]
    status = Path(f"/proc/{pid}/status").read_text()
    uid = int(re.search(r"^Uid:\s+\d+\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
    gid = int(re.search(r"^Gid:\s+\d+\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
    return uid, gid


#: Runs in the pod's network namespace: GET a URL, print status and body as JSON.
_HTTP_GET = """
import json, sys, urllib.error, urllib.request
req = urllib.request.Request(sys.argv[1], headers=json.loads(sys.argv[2]))
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        status, body = r.status, r.read()
except urllib.error.HTTPError as e:
    status, body = e.code, e.read()
except OSError as e:
    status, body = 0, str(e).encode()
print(json.dumps([status, body.decode(errors="replace")]))
"""


def http_get(netns_pid: int, url: str, headers: Mapping[str, str] | None = None) -> tuple[int, str]:
    """``GET url`` from inside a pod's network namespace (0: no connection)."""
    res = subprocess.run(
        ["nsenter", f"--net=/proc/{netns_pid}/ns/net", sys.executable, "-c", _HTTP_GET, url,
         json.dumps(dict(headers or {}))],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    status, body = json.loads(res.stdout)
    return int(status), str(body)


def probe_passes(netns_pid: int, container: dict[str, Any], probe: dict[str, Any]) -> bool:
    """An ``httpGet`` probe as the kubelet runs it: 200-399 passes."""
    assert set(probe) - {"initialDelaySeconds", "periodSeconds", "failureThreshold",
                         "timeoutSeconds", "successThreshold"} == {"httpGet"}, probe  # fmt: skip
    get = probe["httpGet"]
    port = get["port"]
    if not str(port).isdigit():
        (port,) = [p["containerPort"] for p in container["ports"] if p.get("name") == port]
    status, _ = http_get(netns_pid, f"http://127.0.0.1:{port}{get.get('path', '/')}")
    return 200 <= status < 400


def probes(container: dict[str, Any]) -> Iterable[tuple[str, dict[str, Any]]]:
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        if kind in container:
            yield kind, container[kind]
