"""The kustomize tree under k8s/: it builds, validates against the Kubernetes schemas offline,
and its pods, Services, probes, settings and Secrets agree with each other and with the code."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from deploy_support import (
    K8S,
    KUBE_VERSION,
    OVERLAYS,
    ROOT,
    kubectl,
    kustomization_dirs,
    kustomize_build,
    load_docs,
    settings_env_names,
)

from fleetfish.celery_config import MEDIA_QUEUE, POWER_QUEUE
from fleetfish.settings import Settings

kubernetes_validate = pytest.importorskip("kubernetes_validate")
needs_kubectl = pytest.mark.skipif(kubectl() is None, reason="kubectl (kustomize) not installed")

WORKLOADS = ("Deployment", "StatefulSet")
# CRDs: no schema ships with kubernetes-validate, their structure is checked below instead.
CRD_KINDS = {"ScaledObject", "TriggerAuthentication", "Route"}
PRODUCTION_SECRETS = {"fleetfish-redis", "fleetfish-users", "fleetfish-flower", "fleetfish-tls"}


def render_with_components(tmp_path: Path, components: list[str]) -> list[dict]:
    """Base plus the given components, through a throwaway kustomization (paths relative, as
    kustomize requires)."""
    rel = lambda p: os.path.relpath(p, tmp_path)  # noqa: E731
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [rel(K8S / "base")],
                "components": [rel(K8S / "components" / c) for c in components],
            }
        )
    )
    return kustomize_build(tmp_path)


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request) -> tuple[str, list[dict]]:
    if kubectl() is None:
        pytest.skip("kubectl (kustomize) not installed")
    return request.param, kustomize_build(K8S / "overlays" / request.param)


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def workloads(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] in WORKLOADS}


def containers(workload: dict) -> list[dict]:
    return workload["spec"]["template"]["spec"]["containers"]


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "<from>") for e in container.get("env", [])}


# -- the tree builds and validates --------------------------------------------------------


def kustomization_files(directory: Path) -> list[Path]:
    kust = yaml.safe_load((directory / "kustomization.yaml").read_text())
    files = []
    for entry in kust.get("resources", []) + kust.get("components", []):
        files.append(directory / entry)
    for patch in kust.get("patches", []):
        if "path" in patch:
            files.append(directory / patch["path"])
    for gen in kust.get("secretGenerator", []) + kust.get("configMapGenerator", []):
        for item in gen.get("files", []):
            files.append(directory / item.split("=", 1)[-1])
    return files


@pytest.mark.parametrize("directory", kustomization_dirs(), ids=lambda p: str(p.relative_to(K8S)))
def test_every_file_a_kustomization_lists_exists_and_parses(directory):
    files = kustomization_files(directory)
    assert files, f"{directory} lists nothing"
    for path in files:
        assert path.exists(), f"{directory}/kustomization.yaml lists missing {path}"
        if path.is_dir():
            assert (path / "kustomization.yaml").is_file(), path
        else:
            assert load_docs(path), f"{path} is empty"


def patch_files() -> set[Path]:
    return {
        p.resolve() for d in kustomization_dirs() for p in kustomization_files(d) if p.is_file()
    }


def plain_manifests() -> list[Path]:
    """Every k8s/*.yaml that is a whole object (not a kustomization, generator input or patch)."""
    skip = {p for p in patch_files() if p.name != "kustomization.yaml"}
    inputs = {"users.yaml", "kubeconfig.yaml"}
    paths = []
    for path in sorted(K8S.rglob("*.yaml")):
        if path.name == "kustomization.yaml" or path.name in inputs:
            continue
        kust = yaml.safe_load((path.parent / "kustomization.yaml").read_text())
        patched = {
            (path.parent / p["path"]).resolve() for p in kust.get("patches", []) if "path" in p
        }
        if path.resolve() in patched:
            continue
        paths.append(path)
    assert paths and skip is not None
    return paths


@pytest.mark.parametrize("path", plain_manifests(), ids=lambda p: str(p.relative_to(K8S)))
def test_source_manifests_validate_against_the_schemas(path):
    for doc in load_docs(path):
        if doc["kind"] in CRD_KINDS:
            continue
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_overlays_render_and_validate_strictly(overlay):
    name, docs = overlay
    assert docs
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            continue
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


@needs_kubectl
@pytest.mark.parametrize("components", [["hpa"], ["keda"], ["openshift-route"]])
def test_components_render_on_the_base(tmp_path, components):
    docs = render_with_components(tmp_path, components)
    worker = workloads(docs)["fleetfish-worker"]
    autoscaled = components[0] in ("hpa", "keda")
    # An autoscaler owns the replica count: a fixed one would be reset on every apply.
    assert ("replicas" in worker["spec"]) is not autoscaled
    for doc in docs:
        if doc["kind"] not in CRD_KINDS:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    if components == ["hpa"]:
        (hpa,) = by_kind(docs, "HorizontalPodAutoscaler").values()
        assert hpa["spec"]["scaleTargetRef"]["name"] == "fleetfish-worker"
    if components == ["openshift-route"]:
        (route,) = by_kind(docs, "Route").values()
        assert route["spec"]["to"]["name"] in by_kind(docs, "Service")
        assert route["spec"]["tls"]["termination"] == "edge"


# -- labels, selectors, Services and ports ------------------------------------------------


def test_everything_is_labelled_and_namespaced(overlay):
    _, docs = overlay
    for doc in docs:
        labels = doc["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/name") == "fleetfish", doc["metadata"]["name"]
        assert labels.get("app.kubernetes.io/part-of") == "fleetfish", doc["metadata"]["name"]
        if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"]["namespace"] == "fleetfish", doc["metadata"]["name"]


def test_selectors_match_their_pods(overlay):
    _, docs = overlay
    for name, workload in workloads(docs).items():
        selector = workload["spec"]["selector"]["matchLabels"]
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), name
        assert selector.get("app.kubernetes.io/component"), f"{name} selects by name only"
    pod_labels = [w["spec"]["template"]["metadata"]["labels"] for w in workloads(docs).values()]
    for kind in ("Service", "PodDisruptionBudget"):
        for name, obj in by_kind(docs, kind).items():
            selector = obj["spec"]["selector"]
            selector = selector.get("matchLabels", selector)
            matched = [pl for pl in pod_labels if selector.items() <= pl.items()]
            assert len(matched) == 1, f"{kind} {name} selects {len(matched)} workloads"


def test_service_ports_reach_container_ports(overlay):
    _, docs = overlay
    pods = workloads(docs).values()
    for name, service in by_kind(docs, "Service").items():
        (workload,) = [
            w
            for w in pods
            if service["spec"]["selector"].items()
            <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        ports = {
            p["name"]: p["containerPort"] for c in containers(workload) for p in c.get("ports", [])
        }
        for port in service["spec"]["ports"]:
            target = port["targetPort"]
            number = ports[target] if isinstance(target, str) else target
            assert number in ports.values(), f"Service {name} targets {target}"
            assert port["port"] == number, f"Service {name}: port and container port differ"


def test_container_ports_match_the_commands(overlay):
    _, docs = overlay
    config = by_kind(docs, "ConfigMap")["fleetfish-config"]["data"]
    for name, workload in workloads(docs).items():
        for container in containers(workload):
            ports = [p["containerPort"] for p in container.get("ports", [])]
            argv = container.get("command", []) + container.get("args", [])
            if argv and argv[0] == "gunicorn":
                assert ports == [int(config["FLEETFISH_PORT"])], name
                assert config["FLEETFISH_BIND"] == "0.0.0.0"
            for i, arg in enumerate(argv):
                if arg == "--port":
                    assert ports == [int(argv[i + 1])], name
                elif arg.startswith("--port="):
                    assert ports == [int(arg.split("=", 1)[1])], name


def test_probes_use_declared_ports(overlay):
    _, docs = overlay
    for name, workload in workloads(docs).items():
        for container in containers(workload):
            port_names = {p["name"] for p in container.get("ports", [])}
            for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
                probe = container.get(kind)
                if not probe:
                    continue
                for action in ("httpGet", "tcpSocket"):
                    if action in probe:
                        assert probe[action]["port"] in port_names, f"{name} {kind}"
            assert container.get("livenessProbe") or container.get("readinessProbe"), name


def test_api_is_highly_available(overlay):
    _, docs = overlay
    api = workloads(docs)["fleetfish-api"]
    assert api["spec"]["replicas"] >= 2
    probe = containers(api)[0]["readinessProbe"]["httpGet"]
    assert probe["path"] == "/redfish/v1/"
    assert containers(api)[0]["livenessProbe"]["httpGet"]["path"] == "/redfish/v1/"
    assert by_kind(docs, "PodDisruptionBudget")["fleetfish-api"]["spec"]["minAvailable"] == 1


# -- pod security ---------------------------------------------------------------------


def test_pods_are_restricted(overlay):
    _, docs = overlay
    for name, workload in workloads(docs).items():
        spec = workload["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        # Service links would add FLEETFISH_API_PORT=tcp://... style variables to every pod.
        assert spec["enableServiceLinks"] is False, name
        for container in spec["containers"]:
            sc = container["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["capabilities"]["drop"] == ["ALL"], name
            assert container["resources"]["requests"] and container["resources"]["limits"], name
            if container["image"].split("/")[-1].startswith("fleetfish"):
                assert spec["securityContext"]["runAsUser"] == 10001, name


def test_only_workers_and_watchers_get_a_kubernetes_token(overlay):
    _, docs = overlay
    accounts = by_kind(docs, "ServiceAccount")
    (binding,) = by_kind(docs, "ClusterRoleBinding").values()
    bound = {s["name"] for s in binding["subjects"]}
    for name, workload in workloads(docs).items():
        spec = workload["spec"]["template"]["spec"]
        account = spec["serviceAccountName"]
        assert account in accounts, name
        talks_to_cluster = name in ("fleetfish-worker", "fleetfish-watcher")
        assert (account in bound) is talks_to_cluster, name
        if not talks_to_cluster:
            assert spec["automountServiceAccountToken"] is False, name


# -- settings, Secrets, queues ------------------------------------------------------------


def test_configmap_holds_only_settings_and_parses(overlay):
    _, docs = overlay
    data = by_kind(docs, "ConfigMap")["fleetfish-config"]["data"]
    known = settings_env_names()
    assert set(data) <= known, f"unknown settings: {set(data) - known}"
    settings = Settings.from_env(data)
    assert settings.bind == "0.0.0.0"
    assert settings.port == 8000


def test_pod_environment_names_are_settings(overlay):
    _, docs = overlay
    known = settings_env_names()
    # REDIS_PASSWORD only feeds REDIS_URL (and redis-server); FLOWER_* are Flower's own options.
    extra = {"REDIS_PASSWORD", "REDISCLI_AUTH"}
    for name, workload in workloads(docs).items():
        for container in containers(workload):
            for var in env_of(container):
                assert var in known | extra or (
                    name == "fleetfish-flower" and var.startswith("FLOWER_")
                ), f"{name} sets {var}, which nothing reads"


def test_redis_url_points_at_the_redis_service(overlay):
    _, docs = overlay
    redis_service = by_kind(docs, "Service")["fleetfish-redis"]
    for name, workload in workloads(docs).items():
        for container in containers(workload):
            env = env_of(container)
            if "REDIS_URL" not in env:
                continue
            names = [e["name"] for e in container["env"]]
            # $(REDIS_PASSWORD) expands only when defined earlier in the list.
            assert names.index("REDIS_PASSWORD") < names.index("REDIS_URL"), name
            url = urlparse(env["REDIS_URL"])
            assert url.hostname == redis_service["metadata"]["name"], name
            assert url.port == redis_service["spec"]["ports"][0]["port"], name
            assert url.password == "$(REDIS_PASSWORD)", name


def test_users_file_is_mounted_where_the_setting_points(overlay):
    _, docs = overlay
    users_file = by_kind(docs, "ConfigMap")["fleetfish-config"]["data"]["FLEETFISH_USERS_FILE"]
    api = workloads(docs)["fleetfish-api"]
    mounts = {m["name"]: m["mountPath"] for m in containers(api)[0]["volumeMounts"]}
    volumes = {v["name"]: v for v in api["spec"]["template"]["spec"]["volumes"]}
    secret = volumes["users"]["secret"]["secretName"]
    assert users_file == f"{mounts['users']}/users.yaml"
    assert secret == "fleetfish-users"


def secret_refs(node) -> set[str]:
    """Names of every Secret an object refers to (volumes, env, envFrom, KEDA, Ingress TLS)."""
    refs: set[str] = set()
    if isinstance(node, list):
        for item in node:
            refs |= secret_refs(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key == "secretName":
                refs.add(value)
            elif key in ("secretKeyRef", "secretRef"):
                refs.add(value["name"])
            elif key == "secretTargetRef":
                refs |= {ref["name"] for ref in value}
            else:
                refs |= secret_refs(value)
    return refs


def test_secrets_are_generated_in_the_lab_and_documented_for_production(overlay):
    name, docs = overlay
    refs = secret_refs(docs)
    generated = set(by_kind(docs, "Secret"))
    if name == "lab":
        assert refs <= generated, f"lab references missing Secrets {refs - generated}"
    else:
        assert not generated, "production must not ship credentials"
        assert refs == PRODUCTION_SECRETS
        doc = (ROOT / "docs" / "install-kubernetes.md").read_text()
        for secret in PRODUCTION_SECRETS:
            assert secret in doc, f"docs/install-kubernetes.md does not say how to create {secret}"


def test_lab_users_match_the_compose_users():
    lab = (K8S / "overlays" / "lab" / "users.yaml").read_text()
    assert lab == (ROOT / "deploy" / "users.yaml").read_text()


def test_worker_consumes_exactly_the_celery_queues(overlay):
    _, docs = overlay
    argv = containers(workloads(docs)["fleetfish-worker"])[0]["command"]
    assert argv[:3] == ["celery", "-A", "workers.celery_app"]
    assert set(argv[argv.index("-Q") + 1].split(",")) == {MEDIA_QUEUE, POWER_QUEUE}
    assert "%h" in argv[argv.index("-n") + 1]


def test_watcher_runs_twice(overlay):
    _, docs = overlay
    watcher = workloads(docs)["fleetfish-watcher"]
    assert watcher["spec"]["replicas"] == 2
    assert containers(watcher)[0]["command"] == ["python", "-m", "workers.watcher"]


def test_keda_scales_the_worker_on_the_media_queue(overlay):
    name, docs = overlay
    objects = by_kind(docs, "ScaledObject")
    if name == "lab":
        assert not objects
        return
    (scaled,) = objects.values()
    target = scaled["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "fleetfish-worker")
    assert "replicas" not in workloads(docs)["fleetfish-worker"]["spec"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "redis"
    assert trigger["metadata"]["listName"] == MEDIA_QUEUE
    host, port = trigger["metadata"]["address"].rsplit(":", 1)
    service = by_kind(docs, "Service")["fleetfish-redis"]
    assert host == f"fleetfish-redis.{service['metadata']['namespace']}.svc.cluster.local"
    assert int(port) == service["spec"]["ports"][0]["port"]
    auth = by_kind(docs, "TriggerAuthentication")[trigger["authenticationRef"]["name"]]
    (ref,) = auth["spec"]["secretTargetRef"]
    assert (ref["parameter"], ref["name"], ref["key"]) == (
        "password",
        "fleetfish-redis",
        "password",
    )
    assert scaled["spec"]["minReplicaCount"] >= 1 <= scaled["spec"]["maxReplicaCount"]


def test_production_exposes_the_api_over_tls(overlay):
    name, docs = overlay
    ingresses = by_kind(docs, "Ingress")
    if name == "lab":
        assert not ingresses
        return
    (ingress,) = ingresses.values()
    (tls,) = ingress["spec"]["tls"]
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] in tls["hosts"]
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] in by_kind(docs, "Service")
    assert rule["http"]["paths"][0]["path"] == "/redfish"


def test_lab_workers_use_the_simulator(overlay):
    name, docs = overlay
    if name != "lab":
        return
    kubeconfig = yaml.safe_load(
        by_kind(docs, "ConfigMap")["fleetfish-lab-kubeconfig"]["data"]["config"]
    )
    server = urlparse(kubeconfig["clusters"][0]["cluster"]["server"])
    sim = by_kind(docs, "Service")[server.hostname]
    assert sim["spec"]["ports"][0]["port"] == server.port
    for workload in ("fleetfish-worker", "fleetfish-watcher"):
        (container,) = containers(workloads(docs)[workload])
        path = env_of(container)["FLEETFISH_KUBECONFIG"]
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert os.path.dirname(path) in mounts, workload


def test_production_reserves_cpu_for_redis():
    """Redis is on the path of every Redfish call: production reserves half a core for it (a
    starved Redis tripled the API's answer p99 in the fleet benchmark)."""
    if kubectl() is None:
        pytest.skip("kubectl (kustomize) not installed")
    docs = kustomize_build(K8S / "overlays" / "production")
    (redis,) = [
        c
        for c in containers(by_kind(docs, "StatefulSet")["fleetfish-redis"])
        if c["name"] == "redis"
    ]
    request = redis["resources"]["requests"]["cpu"]
    millicores = int(request[:-1]) if request.endswith("m") else int(float(request) * 1000)
    assert millicores >= 500
