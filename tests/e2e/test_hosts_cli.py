"""``fleetfish hosts`` against a running lab: the install-config hosts and the Metal3
BareMetalHost manifests it prints validate, name the lab's VMs with their MACs, boot mode and
root disk serial, and their BMC addresses reach those systems."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import pytest
import requests
import yaml

from lab.stack import LAB_NAMESPACE
from tests.e2e.conftest import ironic, lab_vm_names, system_id, wait_for

pytestmark = pytest.mark.e2e

VMS = 4
ENDPOINT = "https://fleetfish.example.com:443"
FLEETFISH = Path(sys.executable).with_name("fleetfish")  # the console script of setup.cfg
BMH_SCHEMA = yaml.safe_load(
    (Path(__file__).with_name("metal3") / "baremetalhost-schema.yaml").read_text()
)

# The fields of a platform.baremetal.hosts entry in OpenShift's install-config.yaml, from
# openshift/installer pkg/types/baremetal (Host, BMC, RootDeviceHints), as a JSON schema.
HINTS = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        **dict.fromkeys(
            (
                "deviceName",
                "hctl",
                "model",
                "vendor",
                "serialNumber",
                "wwn",
                "wwnWithExtension",
                "wwnVendorExtension",
            ),
            {"type": "string"},
        ),
        "minSizeGigabytes": {"type": "integer", "minimum": 0},
        "rotational": {"type": "boolean"},
    },
}
INSTALL_CONFIG_HOST = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "role", "bmc", "bootMACAddress"],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
        "role": {"enum": ["master", "worker", "arbiter"]},
        "bmc": {
            "type": "object",
            "additionalProperties": False,
            "required": ["address", "username", "password"],
            "properties": {
                "address": {"type": "string"},
                "username": {"type": "string", "minLength": 1},
                "password": {"type": "string", "minLength": 1},
                "disableCertificateVerification": {"type": "boolean"},
            },
        },
        "bootMACAddress": {"type": "string", "pattern": "^[0-9a-f]{2}(:[0-9a-f]{2}){5}$"},
        "bootMode": {"enum": ["UEFI", "UEFISecureBoot", "legacy"]},
        "rootDeviceHints": HINTS,
        "hardwareProfile": {"type": "string"},
        "networkConfig": {"type": "object"},
    },
}


@pytest.fixture(scope="module")
def stack(lab_factory):
    return lab_factory(vms=VMS, import_seconds=1, workers=1)


def hosts(stack, *args: str, password: str = "s3cret") -> subprocess.CompletedProcess:
    env = {**os.environ, "REDIS_URL": stack.redis_url, "FLEETFISH_BMC_PASSWORD": password}
    return subprocess.run(
        [str(FLEETFISH), "hosts", "--username", "ironic", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def lab_vm(stack, name: str) -> dict:
    path = f"/apis/kubevirt.io/v1/namespaces/{LAB_NAMESPACE}/virtualmachines/{name}"
    reply = requests.get(stack.kube_url + path, timeout=5)
    reply.raise_for_status()
    return reply.json()


def expected(stack, name: str) -> dict:
    devices = lab_vm(stack, name)["spec"]["template"]["spec"]["domain"]["devices"]
    return {
        "mac": devices["interfaces"][0]["macAddress"],
        "serial": devices["disks"][0]["serial"],
        "role": "master" if "master" in name else "worker",
    }


def test_baremetalhosts_validate_against_the_crd_and_describe_the_vms(stack):
    done = hosts(
        stack,
        "--format=baremetalhost",
        f"--endpoint={ENDPOINT}",
        f"--namespace={LAB_NAMESPACE}",
        "--disable-certificate-verification",
    )
    assert done.returncode == 0, done.stderr
    docs = list(yaml.safe_load_all(done.stdout))
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    bmhs = [d for d in docs if d["kind"] == "BareMetalHost"]
    assert [b["metadata"]["name"] for b in bmhs] == sorted(lab_vm_names(VMS))
    for bmh in bmhs:
        jsonschema.validate(bmh, BMH_SCHEMA)
        name, spec = bmh["metadata"]["name"], bmh["spec"]
        want = expected(stack, name)
        assert spec["bootMACAddress"] == want["mac"]
        assert spec["bootMode"] == "UEFI"
        assert spec["rootDeviceHints"] == {"serialNumber": want["serial"]}
        assert bmh["metadata"]["labels"]["fleetfish.io/role"] == want["role"]
        assert spec["bmc"] == {
            "address": f"redfish-virtualmedia://fleetfish.example.com:443/redfish/v1/Systems/"
            f"{system_id(name)}",
            "credentialsName": f"{name}-bmc-secret",
            "disableCertificateVerification": True,
        }
        secret = secrets[spec["bmc"]["credentialsName"]]
        assert secret["stringData"] == {"username": "ironic", "password": "s3cret"}
        assert secret["metadata"]["namespace"] == bmh["metadata"]["namespace"]


def test_install_config_hosts_validate_and_their_addresses_reach_the_systems(stack):
    done = hosts(stack, "--format=install-config", f"--endpoint={stack.redfish_url}")
    assert done.returncode == 0, done.stderr
    entries = yaml.safe_load(done.stdout)["platform"]["baremetal"]["hosts"]
    assert [h["name"] for h in entries] == sorted(lab_vm_names(VMS))
    node = ironic(stack)
    for host in entries:
        jsonschema.validate(host, INSTALL_CONFIG_HOST)
        want = expected(stack, host["name"])
        assert (host["role"], host["bootMACAddress"], host["bootMode"]) == (
            want["role"],
            want["mac"],
            "UEFI",
        )
        assert host["rootDeviceHints"] == {"serialNumber": want["serial"]}
        assert "disableCertificateVerification" not in host["bmc"]
        # The lab serves plain HTTP: the +http scheme, and the path is the system's.
        address = urlsplit(host["bmc"]["address"])
        assert address.scheme == "redfish-virtualmedia+http"
        assert f"http://{address.netloc}" == stack.redfish_url.rstrip("/")
        system = node.client.get_system(address.path)
        assert system.identity == system_id(host["name"])
        assert [n.mac_address for n in system.ethernet_interfaces.get_members()] == [want["mac"]]


def test_role_label_selector_and_pattern(stack):
    patch = {"metadata": {"labels": {"fleetfish.io/role": "arbiter"}}}
    path = f"/apis/kubevirt.io/v1/namespaces/{LAB_NAMESPACE}/virtualmachines/ostest-worker-0"
    reply = requests.patch(
        stack.kube_url + path,
        json=patch,
        headers={"Content-Type": "application/merge-patch+json"},
        timeout=5,
    )
    reply.raise_for_status()

    def roles(*args: str) -> dict[str, str]:
        done = hosts(stack, "--format=install-config", f"--endpoint={ENDPOINT}", *args)
        assert done.returncode == 0, done.stderr
        return {
            h["name"]: h["role"]
            for h in yaml.safe_load(done.stdout)["platform"]["baremetal"]["hosts"]
        }

    wait_for(lambda: roles().get("ostest-worker-0") == "arbiter", 30, what="the label mirrored")
    assert roles("--master-pattern", "master-[01]$") == {
        "ostest-master-0": "master",
        "ostest-master-1": "master",
        "ostest-master-2": "worker",
        "ostest-worker-0": "arbiter",
    }
    assert list(roles("--selector", "fleetfish.io/role=arbiter")) == ["ostest-worker-0"]
    assert roles("--selector", "app.kubernetes.io/part-of=elsewhere") == {}
    assert roles("--namespace", "other") == {}


def test_refuses_without_a_password_or_with_a_bad_endpoint(stack):
    done = hosts(stack, "--format=install-config", f"--endpoint={ENDPOINT}", password="")
    assert done.returncode == 2 and "FLEETFISH_BMC_PASSWORD" in done.stderr
    assert not done.stdout
    done = hosts(stack, "--format=install-config", "--endpoint=ftp://x")
    assert done.returncode == 2 and "--endpoint" in done.stderr
