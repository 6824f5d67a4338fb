"""The Kubernetes manifests in deploy/k8s/, parsed with PyYAML (no cluster in CI).

They are held to the code they deploy: the collector sidecar tails the file the trainer
writes, the Service reaches the ports the commands listen on, only training pods reach the
ingest port, the token never appears in a manifest, and the DeepSpeed config they ship
passes dsmon's own "observe" checks.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from deploy_support import (
    K8S,
    containers,
    dsmon_argv,
    env_of,
    flag,
    load_manifests,
    one,
    pod_spec,
    resources,
    workloads,
    yaml_documents,
)

from cli import main as cli
from cli import ui_server
from dsmon.serve.run import DEFAULT_PORT as INGEST_PORT

TOKEN_SECRET = "dsmon-ingest-token"
UNITS = {"m": 1e-3, "": 1.0, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity(q: Any) -> float:
    """A Kubernetes quantity (``250m``, ``2``, ``512Mi``) as a number."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(m|Ki|Mi|Gi|Ti|)", str(q))
    assert m, f"unexpected quantity {q!r}"
    return float(m.group(1)) * UNITS[m.group(2)]


def job_pod() -> dict[str, Any]:
    return pod_spec(one("Job"))


def init_container(command: str) -> dict[str, Any]:
    (c,) = [c for c in job_pod().get("initContainers", []) if (dsmon_argv(c) or [""])[0] == command]
    return c


def sidecar() -> dict[str, Any]:
    return init_container("collect")


def trainer() -> dict[str, Any]:
    (c,) = job_pod()["containers"]
    return c


def dashboard_containers() -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in pod_spec(one("Deployment"))["containers"]}


def mount_of(container: dict[str, Any], path: str) -> dict[str, Any]:
    """The volume mount holding ``path`` in ``container`` (the deepest one)."""
    found = [
        m
        for m in container.get("volumeMounts", [])
        if PurePosixPath(path).is_relative_to(m["mountPath"])
    ]
    assert found, f"{container['name']} mounts nothing holding {path}"
    return max(found, key=lambda m: len(m["mountPath"]))


def labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# --- kustomize ---------------------------------------------------------------------------


def listed_paths(kustomization: dict[str, Any]) -> set[str]:
    listed = set(kustomization.get("resources", []))
    listed |= {p["path"] for p in kustomization.get("patches", [])}
    for gen in kustomization.get("configMapGenerator", []) + kustomization.get(
        "secretGenerator", []
    ):
        listed |= {f.split("=")[-1] for f in gen.get("files", [])}
    return listed


@pytest.mark.parametrize(
    "kfile", sorted(K8S.rglob("kustomization.yaml")), ids=lambda p: str(p.relative_to(K8S))
)
def test_kustomization_lists_every_file_beside_it(kfile: Path) -> None:
    (k,) = load_manifests(kfile.parent)[kfile]
    assert k["apiVersion"] == "kustomize.config.k8s.io/v1beta1" and k["kind"] == "Kustomization"
    here = {p.name for p in kfile.parent.iterdir() if p.is_file()} - {"kustomization.yaml"}
    listed = listed_paths(k)
    local = {p for p in listed if "/" not in p and (kfile.parent / p).is_file()}
    assert local == here, f"not listed: {here - local}"
    for p in listed - local:  # folders: other kustomizations
        assert (kfile.parent / p / "kustomization.yaml").is_file(), p


def test_entry_points_cover_every_folder() -> None:
    roots = {p.parent.relative_to(K8S) for p in K8S.rglob("kustomization.yaml")}
    assert roots == {Path("."), Path("base"), Path("postgresql")}
    (top,) = load_manifests(K8S)[K8S / "kustomization.yaml"]
    assert top["resources"] == ["base"]
    (pg,) = load_manifests(K8S)[K8S / "postgresql" / "kustomization.yaml"]
    assert pg["resources"] == ["../base"]


def test_images_are_mapped_by_kustomize() -> None:
    (base,) = load_manifests(K8S)[K8S / "base" / "kustomization.yaml"]
    mapped = {i["name"] for i in base["images"]}
    used = {c["image"] for w in workloads() for c in containers(pod_spec(w))}
    assert used == mapped == {"dsmon", "dsmon-collector", "trainer"}


@pytest.mark.slow  # a real process (kubectl)
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) not installed")
@pytest.mark.parametrize("entry", [".", "postgresql"])
def test_kustomize_renders(entry: str) -> None:
    res = subprocess.run(
        ["kubectl", "kustomize", str(K8S / entry)], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    docs = [d for d in yaml_documents(res.stdout) if d]
    kinds = sorted(d["kind"] for d in docs)
    expected = ["ConfigMap", "Deployment", "Job", "NetworkPolicy", "Service"]
    assert kinds == sorted(expected + ([] if entry == "postgresql" else ["PersistentVolumeClaim"]))
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    (job,) = [d for d in docs if d["kind"] == "Job"]
    assert pod_spec(job)["volumes"][2]["configMap"]["name"] == cm["metadata"]["name"]
    images = {c["image"] for d in docs if "template" in d.get("spec", {}) for c in
              containers(pod_spec(d))}  # fmt: skip
    assert {"dsmon:0.1.0", "dsmon-collector:0.1.0"} <= images


# --- the training Job and its sidecar ------------------------------------------------------


def test_training_pods_run_the_collector_image_and_the_dashboard_the_full_one() -> None:
    """The sidecar's image is pulled onto every training node: the light one (the Dockerfile's
    collector target, tests/system/test_k8s_pod.py runs it); the dashboard needs the full one."""
    dsmon_in_job = [c for c in containers(job_pod()) if dsmon_argv(c) is not None]
    assert [c["name"] for c in dsmon_in_job] == ["dsmon-probe", "dsmon-collector"]
    assert {c["image"] for c in dsmon_in_job} == {"dsmon-collector"}
    assert {c["image"] for c in dashboard_containers().values()} == {"dsmon"}


def test_collector_is_a_native_sidecar() -> None:
    spec = job_pod()
    c = sidecar()
    assert c["restartPolicy"] == "Always"
    assert (dsmon_argv(c) or [""])[0] == "collect"
    assert spec["restartPolicy"] == "Never"
    assert all("restartPolicy" not in t for t in spec["containers"])
    # Time to deliver the last lines after SIGTERM.
    assert spec["terminationGracePeriodSeconds"] >= 30


def test_sidecar_tails_the_file_the_trainer_writes() -> None:
    argv = dsmon_argv(sidecar())
    assert argv is not None
    log = flag(argv, "--log")
    assert log == "/logs/train.log"
    assert f"tee -a {log}" in trainer()["args"][0]
    side, train = mount_of(sidecar(), log), mount_of(trainer(), log)
    assert side["name"] == train["name"] == "logs"
    assert side["mountPath"] == train["mountPath"]
    assert side.get("readOnly") is True and not train.get("readOnly")
    (vol,) = [v for v in job_pod()["volumes"] if v["name"] == "logs"]
    assert "emptyDir" in vol


def test_sidecar_rereads_the_flops_profile_the_config_writes() -> None:
    argv = dsmon_argv(sidecar())
    assert argv is not None
    profile = flag(argv, "--profile-file")
    config = json.loads((K8S / "base" / "ds_config.json").read_text(encoding="utf-8"))
    assert config["flops_profiler"]["output_file"] == profile == "/logs/flops_profile.txt"
    assert mount_of(sidecar(), profile)["name"] == mount_of(trainer(), profile)["name"]
    config_mount = mount_of(trainer(), "/etc/deepspeed/ds_config.json")
    assert "--deepspeed_config /etc/deepspeed/ds_config.json" in trainer()["args"][0]
    (vol,) = [v for v in job_pod()["volumes"] if v["name"] == config_mount["name"]]
    assert vol["configMap"]["name"] == "deepspeed-config"


def test_probe_is_copied_loaded_by_the_trainer_and_followed() -> None:
    copy = init_container("probe")
    argv = dsmon_argv(copy)
    assert argv is not None and "restartPolicy" not in copy  # runs once, before the trainer
    code, probe_dir = argv[1], flag(argv, "--probe-dir")
    env = env_of(trainer())
    assert env["PYTHONPATH"]["value"] == f"{code}/boot"
    assert (
        env["DSMON_PROBE_DIR"]["value"]
        == probe_dir
        == flag(dsmon_argv(sidecar()) or [], "--probe-dir")
    )
    assert mount_of(copy, code)["name"] == mount_of(trainer(), code)["name"] == "dsmon-probe"
    assert mount_of(trainer(), code).get("readOnly") is True
    assert probe_dir is not None
    assert (
        mount_of(trainer(), probe_dir)["name"] == mount_of(sidecar(), probe_dir)["name"] == "logs"
    )
    init_order = [c["name"] for c in job_pod()["initContainers"]]
    assert init_order.index(copy["name"]) < init_order.index(sidecar()["name"])


def test_sidecar_state_survives_a_container_restart() -> None:
    argv = dsmon_argv(sidecar())
    assert argv is not None
    state = flag(argv, "--state-dir")
    assert state is not None
    mount = mount_of(sidecar(), state)
    (vol,) = [v for v in job_pod()["volumes"] if v["name"] == mount["name"]]
    assert "emptyDir" in vol and mount["name"] != "logs"


def test_node_and_run_names_come_from_the_downward_api() -> None:
    argv = dsmon_argv(sidecar())
    assert argv is not None
    env = env_of(sidecar())
    node = re.fullmatch(r"\$\((\w+)\)", flag(argv, "--node") or "")
    run = re.fullmatch(r"\$\((\w+)\)", flag(argv, "--run") or "")
    assert node and run
    assert env[node.group(1)]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env[run.group(1)]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.labels['batch.kubernetes.io/job-name']"
    )


def test_sidecar_sends_to_the_dashboard_service_ingest_port() -> None:
    argv = dsmon_argv(sidecar())
    assert argv is not None
    svc = one("Service")
    assert flag(argv, "--server") == f"http://{svc['metadata']['name']}:{INGEST_PORT}"


def test_sidecar_gpu_visibility_and_no_healthcheck() -> None:
    env = env_of(sidecar())
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    assert env["DSMON_HEALTH_URL"]["value"] == ""
    assert "nvidia.com/gpu" not in sidecar()["resources"]["limits"]
    assert trainer()["resources"]["limits"]["nvidia.com/gpu"] == 8
    # The sidecar samples the GPUs the trainer lists on the shared volume.
    gpus = flag(dsmon_argv(sidecar()) or [], "--gpus") or ""
    assert gpus == "@/logs/gpus.txt"
    assert mount_of(sidecar(), gpus[1:])["name"] == mount_of(trainer(), gpus[1:])["name"]
    assert f"mv {gpus[1:]}.tmp {gpus[1:]}" in trainer()["args"][0]


# --- token ---------------------------------------------------------------------------------


def test_token_comes_from_a_secret_key_ref() -> None:
    users = [sidecar(), dashboard_containers()["ingest"]]
    for c in users:
        ref = env_of(c)["DSMON_TOKEN"]
        assert "value" not in ref, c["name"]
        assert ref["valueFrom"]["secretKeyRef"] == {"name": TOKEN_SECRET, "key": "token"}
    # No manifest carries a token or a token file of its own.
    kinds = {r["kind"] for r in resources()}
    assert "Secret" not in kinds
    for w in workloads():
        for c in containers(pod_spec(w)):
            argv = dsmon_argv(c) or []
            assert "--token-file" not in argv and "--new-token-file" not in argv


# --- resources -----------------------------------------------------------------------------


def every_container() -> list[tuple[str, dict[str, Any]]]:
    return [(f"{w['kind']}/{c['name']}", c) for w in workloads() for c in containers(pod_spec(w))]


@pytest.mark.parametrize(("where", "c"), [pytest.param(w, c, id=w) for w, c in every_container()])
def test_every_container_has_requests_and_limits(where: str, c: dict[str, Any]) -> None:
    res = c["resources"]
    for kind in ("cpu", "memory"):
        request, limit = quantity(res["requests"][kind]), quantity(res["limits"][kind])
        assert 0 < request <= limit, f"{where}: {kind} {request} > {limit}"


def test_quantity_parser() -> None:
    assert quantity("250m") == 0.25 and quantity("2") == 2.0
    assert quantity("512Mi") == 512 * 2**20 and quantity("2Gi") == 2 * 2**30


# --- dashboard: ports, Service, NetworkPolicy ------------------------------------------------


def test_dashboard_containers_listen_where_the_service_looks() -> None:
    by_name = dashboard_containers()
    ui, ingest = dsmon_argv(by_name["ui"]), dsmon_argv(by_name["ingest"])
    assert ui is not None and ingest is not None
    assert ui[0] == "dashboard" and ingest[0] == "serve"
    # Both bind every interface (the defaults are loopback, unreachable from the Service).
    assert flag(ui, "--address") == "0.0.0.0" and flag(ingest, "--host") == "0.0.0.0"
    assert by_name["ui"]["ports"] == [
        {"name": "ui", "containerPort": int(flag(ui, "--port") or 0), "protocol": "TCP"}
    ]
    assert by_name["ingest"]["ports"] == [
        {"name": "ingest", "containerPort": int(flag(ingest, "--port") or 0), "protocol": "TCP"}
    ]
    assert int(flag(ui, "--port") or 0) == ui_server.DEFAULT_PORT
    assert int(flag(ingest, "--port") or 0) == INGEST_PORT


def test_service_targets_the_right_container_ports() -> None:
    svc, dep = one("Service"), one("Deployment")
    assert labels_match(svc["spec"]["selector"], dep["spec"]["template"]["metadata"]["labels"])
    named = {
        p["name"]: p["containerPort"] for c in dashboard_containers().values() for p in c["ports"]
    }
    targets = {p["port"]: named[p["targetPort"]] for p in svc["spec"]["ports"]}
    assert targets == {ui_server.DEFAULT_PORT: 8501, INGEST_PORT: 8502}


def test_probes_hit_the_health_endpoints() -> None:
    by_name = dashboard_containers()
    for probe in ("readinessProbe", "livenessProbe"):
        assert by_name["ingest"][probe]["httpGet"] == {"path": "/healthz", "port": "ingest"}
        assert by_name["ui"][probe]["httpGet"] == {"path": "/_stcore/health", "port": "ui"}


def test_dashboard_store_is_on_the_claim() -> None:
    spec = pod_spec(one("Deployment"))
    claim = one("PersistentVolumeClaim")["metadata"]["name"]
    (vol,) = spec["volumes"]
    assert vol["persistentVolumeClaim"]["claimName"] == claim
    for c in spec["containers"]:
        store = env_of(c)["DSMON_STORE"]["value"]
        assert mount_of(c, store)["name"] == vol["name"]
    assert one("Deployment")["spec"]["replicas"] == 1
    assert one("Deployment")["spec"]["strategy"]["type"] == "Recreate"


def test_network_policy_admits_only_the_jobs_pods_on_the_ingest_port() -> None:
    pol, dep = one("NetworkPolicy"), one("Deployment")
    dash_labels = dep["spec"]["template"]["metadata"]["labels"]
    job_labels = one("Job")["spec"]["template"]["metadata"]["labels"]
    assert labels_match(pol["spec"]["podSelector"]["matchLabels"], dash_labels)
    assert pol["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = pol["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": INGEST_PORT}]
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"}  # same namespace, no ipBlock, no namespaceSelector
    selector = peer["podSelector"]["matchLabels"]
    assert selector and labels_match(selector, job_labels)
    assert not labels_match(selector, dash_labels)


# --- the PostgreSQL overlay ----------------------------------------------------------------


def test_postgresql_overlay_takes_the_store_url_from_a_secret() -> None:
    docs = load_manifests(K8S / "postgresql")
    (patch,) = docs[K8S / "postgresql" / "dashboard-store.yaml"]
    (drop,) = docs[K8S / "postgresql" / "drop-sqlite-pvc.yaml"]
    assert patch["metadata"]["name"] == one("Deployment")["metadata"]["name"]
    patched = {c["name"]: env_of(c)["DSMON_STORE"] for c in pod_spec(patch)["containers"]}
    assert set(patched) == set(dashboard_containers())
    for entry in patched.values():
        assert entry["value"] is None  # strategic merge: drop the SQLite path
        assert entry["valueFrom"]["secretKeyRef"] == {"name": "dsmon-postgres", "key": "url"}
    (vol,) = pod_spec(patch)["volumes"]
    assert vol == {"name": "data", "persistentVolumeClaim": None, "emptyDir": {}}
    assert drop["$patch"] == "delete"
    assert drop["metadata"]["name"] == one("PersistentVolumeClaim")["metadata"]["name"]


# --- the DeepSpeed config they ship --------------------------------------------------------


def test_shipped_ds_config_passes_dsmons_observe_checks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(["check", "--json", str(K8S / "base" / "ds_config.json")])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    report = json.loads(out)
    assert report["counts"]["fail"] == report["counts"]["warn"] == 0
    observe = {
        r["id"]: r["status"]
        for r in report["results"]
        if r["id"].startswith("observe.") and r["category"] == "config"  # not the log's own
    }
    assert set(observe.values()) == {"pass"}, observe
    assert {
        "observe.wall_clock_breakdown",
        "observe.steps_per_print",
        "observe.log_level",
        "observe.flops_profiler",
    } <= set(observe)
