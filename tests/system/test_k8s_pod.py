"""The pods of ``deploy/k8s`` run as containers of the built images beside a REAL DeepSpeed job.

``scripts/containers.sh images`` builds the Dockerfile's two images (``dsmon``, every role;
``dsmon-collector``, the sidecar's) on a Debian bookworm base made from Debian's packages,
and a stand-in training image (the base and a compiler; torch and DeepSpeed come from the
training virtualenv CI builds, mounted). Then the manifests are run the way the kubelet runs
them (``tests/pod_support.py``): every container's image, command, arguments, environment,
volumes and security context come from the YAML, nothing is restated here, so the test fails
when a manifest and an image disagree (a flag the image's dsmon lacks, a path the user cannot
write, a root user where runAsNonRoot is set).

1. the dashboard Deployment's pod: ``ingest`` and ``ui`` on the claim, until both pass their
   probes;
2. the training Job's pod: the ``dsmon-probe`` init container runs to completion, the
   ``dsmon-collector`` native sidecar starts, then the trainer: the manifest's own script, with
   the part users replace (the launcher's GPU count and the training script) set to a 2-rank
   CPU job, and the ConfigMap's ``ds_config.json`` with what a CPU run needs changed;
3. when the trainer exits, the sidecar gets SIGTERM, as the kubelet sends it, and must deliver
   what it still holds and exit within the pod's grace period, with status 0;
4. every rank's ``rank_step`` and heartbeat lines the probe wrote, and every ``step=`` line of
   the log, are in the store; the dashboard answers; the health checks (the manifests' probes
   and the image's HEALTHCHECK) pass; the containers run as uid 10001, read-only where the
   manifest says so.

The figures (sizes, steps written and stored, what the sidecar sent after SIGTERM) are
printed; ``pytest -s`` or ``-rA`` shows them. Skipped without Podman (or not as root) or
without DeepSpeed, unless ``DSMON_REQUIRE_PODMAN=1`` / ``DSMON_REQUIRE_DEEPSPEED=1``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from deepspeed_support import DEADLINE_S, deepspeed_bin
from deploy_support import K8S, containers, dsmon_argv, one, pod_spec, resources
from locations import TESTS
from pod_support import (
    Cluster,
    PodRun,
    build_images,
    container_state,
    engine_missing,
    http_get,
    image_key,
    image_size_mb,
    podman,
    probe_passes,
    probes,
    process_uid_gid,
)

from dsmon.store.store import open_store

pytestmark = pytest.mark.slow

#: Optimizer steps of the job: past the flops profiler's profile_step, a few step= lines, and
#: enough for the checks below to run before the job ends (12 s at the least).
STEPS = 60
#: Seconds each rank waits after a step, so the sidecar reads while the job runs.
SLEEP_S = 0.2
#: The node the Job's pod "landed on" (the downward API's spec.nodeName).
NODE = "node-1"
#: The collector image's size limit (issue 40): it is pulled onto every training node.
COLLECTOR_MAX_MB = 200


@pytest.fixture(scope="module")
def images() -> dict[str, str]:
    reason = engine_missing()
    if reason:
        if os.environ.get("DSMON_REQUIRE_PODMAN") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    deepspeed_bin()  # skips before the build, not after, when there is no training venv
    return build_images()


@pytest.fixture
def pod(tmp_path: Path) -> Iterator[str]:
    """One Podman pod (loopback only) standing for the cluster network; removed at the end."""
    name = f"dsmon-k8s-{os.getpid()}"
    podman("pod", "create", "--name", name, "--network", "none", "--hostname", name)
    podman("pod", "start", name)
    try:
        yield name
    finally:
        for cid in podman("ps", "-a", "-q", "--filter", f"pod={name}").stdout.split():
            podman("rm", "-f", "-v", cid, check=False)
        podman("pod", "rm", "-f", name, check=False)


def netns_pid(pod: str) -> int:
    infra = podman("pod", "inspect", pod, "--format", "{{.InfraContainerID}}").stdout.strip()
    return int(container_state(infra)["Pid"])


def cpu_config(shipped: dict[str, Any]) -> dict[str, Any]:
    """The ConfigMap's DeepSpeed config, as a CPU run of the tiny model can take it.

    bf16 off (the model is fed float32 on CPU), and torch's AdamW rather than DeepSpeed's
    fused one (whose CPU build would need a compile at start). Every dsmon setting (timers,
    log level, the flops profiler's output file on the shared volume) stays as shipped.
    """
    config = json.loads(json.dumps(shipped))
    config["bf16"] = {"enabled": False}
    config["optimizer"]["params"]["torch_adam"] = True
    return config


def config_maps(tmp_path: Path) -> dict[str, Path]:
    """The kustomization's configMapGenerator, each map a folder of its files."""
    kustomization = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())
    out = {}
    for gen in kustomization["configMapGenerator"]:
        folder = tmp_path / "configmaps" / gen["name"]
        folder.mkdir(parents=True)
        for file in gen["files"]:
            text = (K8S / "base" / file).read_text()
            if file == "ds_config.json":
                text = json.dumps(cpu_config(json.loads(text)), indent=2)
            (folder / file).write_text(text)
        out[gen["name"]] = folder
    return out


def trainer_script(script: str) -> tuple[str, str]:
    """The manifest's trainer script with the user's part set, and the script's folder.

    Only ``deepspeed --num_gpus N SCRIPT.py`` changes: 2 ranks of the tests' tiny model, for
    :data:`STEPS` steps. The config flag, the tee into the shared log and the GPU list stay.
    """
    m = re.search(r"deepspeed --num_gpus \d+ (/\S+)/\w+\.py", script)
    assert m, f"the trainer no longer launches deepspeed as expected:\n{script}"
    launch = (f"deepspeed --num_gpus 2 {m.group(1)}/train_tiny.py --steps {STEPS} "
              f"--sleep {SLEEP_S}")  # fmt: skip
    return script.replace(m.group(0), launch), m.group(1)


def training_venv() -> tuple[Path, Path]:
    """The training virtualenv and the Python installation it was made from."""
    venv = deepspeed_bin().parent
    base = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sys; print(sys.base_prefix)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return venv, Path(base)


def trainer_extras(venv: Path, base: Path, workspace: str, cache: Path) -> list[str]:
    """What the stand-in image lacks and a user's training image has: torch and DeepSpeed."""
    mounts = [venv] + ([base] if base != Path("/usr") else [])
    args = [a for m in mounts for a in ("--mount", f"type=bind,src={m},dst={m},ro")]
    args += ["--mount", f"type=bind,src={TESTS / 'e2e'},dst={workspace},ro"]
    args += ["--mount", f"type=bind,src={cache},dst=/torch-extensions"]
    return [
        *args,
        "--env",
        f"PATH={venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ]


def hosts_file(tmp_path: Path, pod: str, services: list[dict[str, Any]]) -> Path:
    """/etc/hosts of every container: the pod's name, and each Service on loopback."""
    names = " ".join(s["metadata"]["name"] for s in services)
    path = tmp_path / "hosts"
    path.write_text(f"127.0.0.1 localhost {pod} {names}\n")
    path.chmod(0o644)
    return path


def check_services_on_loopback(
    services: list[dict[str, Any]], dashboard: list[dict[str, Any]]
) -> None:
    """In one network a Service's port is its target container's port: they must be equal."""
    ports = {p["name"]: p["containerPort"] for c in dashboard for p in c.get("ports", [])}
    for svc in services:
        for p in svc["spec"]["ports"]:
            target = p.get("targetPort", p["port"])
            assert ports.get(target, target) == p["port"], (svc["metadata"]["name"], p)


def start(pod_run: PodRun, pod: str, c: dict[str, Any], hosts: Path) -> str:
    name = f"{pod}-{c['name']}"
    args = pod_run.run_args(pod, c, name)
    podman("run", "--detach", "--mount", f"type=bind,src={hosts},dst=/etc/hosts,ro", *args)
    return name


def logs(name: str) -> str:
    res = podman("logs", name, check=False)
    return (res.stdout + res.stderr)[-4000:]


def wait_until(what: str, cond: Any, names: list[str], deadline_s: float = DEADLINE_S) -> None:
    """Until ``cond()``; fails at once if one of the containers ``names`` has exited."""
    deadline = time.monotonic() + deadline_s
    while not cond():
        for n in names:
            state = container_state(n)
            assert state["Running"], f"{n} exited {state['ExitCode']} before {what}:\n{logs(n)}"
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(1)


def written(logs_dir: Path) -> Counter[tuple[str, int]]:
    """(kind, rank) -> lines the probe wrote; ("step", -1) -> the log's step= lines."""
    counts: Counter[tuple[str, int]] = Counter()
    for f in sorted((logs_dir / "probe").glob("rank-*.jsonl")):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            if rec["kind"] in ("rank_step", "heartbeat"):
                counts[(rec["kind"], int(rec["rank"]))] += 1
    log = (logs_dir / "train.log").read_text(errors="replace")
    counts[("step", -1)] = len(re.findall(r"\bstep=\d+, skipped=", log))
    return counts


def stored_kinds(ns: int, token: str, run: str) -> dict[str, int]:
    """The run's record counts per kind, as the ingest server's GET /v1/runs tells them."""
    status, body = http_get(
        ns, "http://127.0.0.1:8502/v1/runs", {"Authorization": f"Bearer {token}"}
    )
    assert status == 200, body
    runs = {r["name"]: r for r in json.loads(body)["runs"]}
    return dict(runs[run]["kinds"]) if run in runs else {}


def healthy(name: str) -> bool:
    """The image's HEALTHCHECK, run now by Podman."""
    return podman("healthcheck", "run", name, check=False).returncode == 0


def read_only_root(name: str) -> bool:
    res = podman("exec", name, "python", "-c", "open('/rootfs-write-check', 'w')", check=False)
    return "Read-only file system" in res.stderr


@pytest.fixture
def cluster(images: dict[str, str], tmp_path: Path) -> Cluster:
    """The Secret and the claim a user creates (docs/kubernetes.md), the kubelet's fields."""
    venv, base = training_venv()
    job = one("Job")
    trainer = pod_spec(job)["containers"][0]
    _, workspace = trainer_script(trainer["args"][0])
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    cache = cache / "dsmon" / "torch-extensions"
    cache.mkdir(parents=True, exist_ok=True)
    (tmp_path / "claim").mkdir()
    name = job["metadata"]["name"]
    return Cluster(
        images=images,
        secrets={"dsmon-ingest-token": {"token": secrets.token_urlsafe(32)}},
        config_maps=config_maps(tmp_path),
        claims={"dsmon-data": tmp_path / "claim"},
        fields={
            one("Deployment")["metadata"]["name"]: {},
            name: {"spec.nodeName": NODE, "metadata.labels['batch.kubernetes.io/job-name']": name},
        },
        scratch=tmp_path / "volumes",
        image_extras={"trainer": trainer_extras(venv, base, workspace, cache)},
    )


def test_the_pods_run_beside_a_real_deepspeed_job(
    images: dict[str, str], cluster: Cluster, pod: str, tmp_path: Path
) -> None:
    report = [f"image {k}: {image_size_mb(v):.0f} MB" for k, v in images.items()]
    job, deployment = one("Job"), one("Deployment")
    services = [r for r in resources() if r["kind"] == "Service"]
    dash = PodRun(deployment["metadata"]["name"], pod_spec(deployment), cluster)
    jobrun = PodRun(job["metadata"]["name"], pod_spec(job), cluster)
    check_services_on_loopback(services, containers(dash.spec))
    run_name = job["metadata"]["name"]  # the collector's --run $(JOB_NAME)
    token = cluster.secrets["dsmon-ingest-token"]["token"]
    hosts = hosts_file(tmp_path, pod, services)
    ns = netns_pid(pod)

    def stored() -> dict[str, int]:
        return stored_kinds(ns, token, run_name)

    # 1. The dashboard pod, until every probe of both containers passes.
    dash_names = {c["name"]: start(dash, pod, c, hosts) for c in containers(dash.spec)}
    for c in containers(dash.spec):
        for kind, probe in probes(c):
            wait_until(f"{c['name']}'s {kind}", lambda c=c, p=probe: probe_passes(ns, c, p),
                       list(dash_names.values()))  # fmt: skip

    # 2. The Job's pod: init containers to completion, the native sidecar, then the trainer.
    names: dict[str, str] = {}
    for c in jobrun.spec["initContainers"]:
        names[c["name"]] = start(jobrun, pod, c, hosts)
        if c.get("restartPolicy") != "Always":
            code = int(podman("wait", names[c["name"]], timeout=120).stdout.strip())
            assert code == 0, f"init container {c['name']} exited {code}:\n{logs(names[c['name']])}"
    (collector,) = [c for c in jobrun.spec["initContainers"] if c.get("restartPolicy") == "Always"]
    sidecar = names[collector["name"]]
    wait_until("the collector to start", lambda: "collecting" in logs(sidecar), [sidecar], 60)
    trainer = dict(jobrun.spec["containers"][0])
    trainer["args"] = [trainer_script(trainer["args"][0])[0]]
    trainer_name = start(jobrun, pod, trainer, hosts)
    started = time.monotonic()
    everyone = [sidecar, trainer_name, *dash_names.values()]
    wait_until("5 steps of both ranks stored",
               lambda: stored().get("rank_step", 0) >= 2 * 5, everyone)  # fmt: skip

    # While it all runs: users, read-only root filesystems, the image's health checks.
    specs = {c["name"]: c for c in containers(dash.spec) + containers(jobrun.spec)}
    running = {
        **{n: (dash, c) for n, c in dash_names.items()},
        collector["name"]: (jobrun, sidecar),
    }
    for cname, (owner, name) in running.items():
        sec = owner.security(specs[cname])
        assert process_uid_gid(name) == (sec["runAsUser"], sec["runAsGroup"]) == (10001, 10001)
        assert read_only_root(name) == bool(sec.get("readOnlyRootFilesystem")), name
        assert healthy(name), f"{name}: the image's HEALTHCHECK fails"
    report.append(f"the image's HEALTHCHECK passes in {', '.join(running)}; the manifests' "
                  "probes pass before and after the job")  # fmt: skip
    report.append(f"uid:gid 10001:10001 in {', '.join(running)}; read-only root filesystem in "
                  + ", ".join(n for n in running if specs[n].get("securityContext", {})
                              .get("readOnlyRootFilesystem")))  # fmt: skip

    # 3. The sidecar is frozen for the job's last steps, so that it is behind when the trainer
    # exits (as one a poll behind, or on a slow link, is). The kubelet's SIGTERM reaches it
    # frozen; thawed, it must deliver everything before it exits, within the grace period.
    podman("pause", sidecar)
    assert container_state(trainer_name)["Running"], "the job ended too soon: raise STEPS"
    code = int(podman("wait", trainer_name, timeout=DEADLINE_S + STEPS * 5).stdout.strip())
    assert code == 0, f"trainer exited {code}:\n{logs(trainer_name)}"
    trained_s = time.monotonic() - started
    at_sigterm = stored()
    t0 = time.monotonic()
    podman("kill", "--signal", "TERM", sidecar)
    podman("unpause", sidecar)
    res = podman("wait", sidecar, timeout=jobrun.grace_s + 10, check=False)
    stop_s = time.monotonic() - t0
    assert res.returncode == 0, f"the collector outlived the grace period:\n{logs(sidecar)}"
    assert int(res.stdout.strip()) == 0, f"collector exited {res.stdout}:\n{logs(sidecar)}"
    assert stop_s < jobrun.grace_s
    after = stored()
    flushed = {k: n - at_sigterm.get(k, 0) for k, n in after.items() if n != at_sigterm.get(k, 0)}
    assert flushed.get("rank_step", 0) > 0, (at_sigterm, after)
    report.append(f"trainer: {STEPS} steps, exit 0 after {trained_s:.0f} s; collector: SIGTERM "
                  f"-> exit 0 in {stop_s:.1f} s (grace {jobrun.grace_s} s), records stored "
                  f"after SIGTERM: {flushed}")  # fmt: skip

    # 4. Everything written is stored; the dashboard answers; its probes still pass.
    wrote = written(jobrun.volumes["logs"][0])
    assert wrote[("rank_step", 0)] == wrote[("rank_step", 1)] == STEPS, wrote
    status, body = http_get(ns, "http://127.0.0.1:8501/")
    assert status == 200 and "<html" in body.lower(), (status, body[:300])
    for c in containers(dash.spec):
        for kind, probe in probes(c):
            assert probe_passes(ns, c, probe), f"{c['name']}: {kind} fails after the run"
    for name in dash_names.values():
        podman("stop", "--time", str(dash.grace_s), name, timeout=dash.grace_s + 30)
        assert container_state(name)["ExitCode"] == 0, f"{name}:\n{logs(name)}"
    got, kinds = in_store(cluster.claims["dsmon-data"] / "dsmon.sqlite", run_name)
    report.append("written / stored: " + ", ".join(
        f"{k}[{r}] {wrote[(k, r)]}/{got[(k, r)]}" if r >= 0 else f"{k}= lines {wrote[(k, r)]}/{got[(k, r)]}"
        for k, r in sorted(wrote)) + f"; every kind stored: {kinds}")  # fmt: skip
    print("\n".join(["", *report]))
    assert got == wrote
    assert kinds.get("flops_profile", 0) >= 1 and kinds.get("timer", 0) >= 1, kinds
    assert "--profile-file" in (dsmon_argv(collector) or [])

    # 5. The collector image: a node's install, within the size a node should pull.
    collector_image = cluster.images[image_key(collector["image"])]
    no_ui = podman("run", "--rm", "--network", "none", "--entrypoint", "python",
                   collector_image, "-c", "import streamlit", check=False)  # fmt: skip
    assert no_ui.returncode != 0, "the collector image carries the dashboard's stack"
    assert image_size_mb(collector_image) <= COLLECTOR_MAX_MB


def in_store(path: Path, run: str) -> tuple[Counter[tuple[str, int]], dict[str, int]]:
    """What :func:`written` counts, read from the store; and the run's count of every kind."""
    store = open_store(path)
    try:
        got: Counter[tuple[str, int]] = Counter()
        for kind in ("rank_step", "heartbeat"):
            for rank, n in store.frames.frame(run, kind).groupby("rank").size().items():
                got[(kind, int(rank))] = int(n)
        got[("step", -1)] = len(store.frames.frame(run, "step"))
        (info,) = [r for r in store.runs() if r.name == run]
        nodes = set(store.frames.frame(run, "rank_step")["node"])
    finally:
        store.close()
    assert nodes == {NODE}, nodes
    return got, dict(info.kinds)
