"""``fleetfish hosts``: the install-config hosts or Metal3 BareMetalHosts of the mirrored VMs.

Reads the Redis mirror the API serves (no cluster access), so what it prints is what Ironic will
find behind each BMC address.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from urllib.parse import urlsplit

import yaml

from fleetfish.mirror import storage_disks
from fleetfish.selectors import matches, parse_selector
from fleetfish.store import Store

# BMC address scheme per endpoint scheme (Metal3: redfish-virtualmedia is HTTPS by default).
SCHEMES = {"https": "redfish-virtualmedia", "http": "redfish-virtualmedia+http"}
ROLES = ("master", "worker", "arbiter")


HELP = "print install-config hosts or BareMetalHost manifests for the mirrored VMs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("install-config", "baremetalhost"), required=True)
    p.add_argument(
        "--endpoint",
        required=True,
        help="fleetfish's Redfish URL as the cluster reaches it, e.g. https://fleetfish.example.com:443",
    )
    p.add_argument("--username", required=True, help="BMC user name for every host")
    p.add_argument(
        "--password",
        default="",
        help="BMC password (visible in the process list: prefer --password-env)",
    )
    p.add_argument(
        "--password-env",
        default="FLEETFISH_BMC_PASSWORD",
        help="environment variable holding the BMC password (default FLEETFISH_BMC_PASSWORD)",
    )
    p.add_argument(
        "--disable-certificate-verification",
        action="store_true",
        help="let Ironic skip checking fleetfish's certificate (self-signed or private CA)",
    )
    p.add_argument(
        "--namespace", action="append", default=[], help="only VMs of this namespace (repeatable)"
    )
    p.add_argument("--selector", default="", help="only VMs whose labels match (Kubernetes syntax)")
    p.add_argument(
        "--role-label",
        default="fleetfish.io/role",
        help="VM label whose value is the host's role (default fleetfish.io/role)",
    )
    p.add_argument(
        "--master-pattern",
        default="master",
        help="without that label: names matching this regular expression are masters, others "
        "workers (default 'master')",
    )
    p.add_argument(
        "--bmh-namespace",
        default="openshift-machine-api",
        help="namespace of the BareMetalHosts and Secrets (default openshift-machine-api)",
    )
    p.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        help="the Redis of the fleetfish deployment (default $REDIS_URL)",
    )


def bmc_address(endpoint: str, system_id: str) -> str:
    parts = urlsplit(endpoint)
    if parts.scheme not in SCHEMES or not parts.netloc:
        raise ValueError(f"--endpoint must be an http:// or https:// URL, not {endpoint!r}")
    return f"{SCHEMES[parts.scheme]}://{parts.netloc}/redfish/v1/Systems/{system_id}"


def boot_mode(doc: dict) -> str:
    if doc.get("bootMode") == "Legacy":
        return "legacy"
    return "UEFISecureBoot" if doc.get("secureBoot") else "UEFI"


def role(doc: dict, label: str, pattern: re.Pattern) -> str:
    value = (doc.get("labels") or {}).get(label)
    if value:
        return value
    return "master" if pattern.search(doc.get("name", "")) else "worker"


def root_device_hints(doc: dict) -> dict:
    """The root disk's serial: the one hint that names that disk and no other. Without a serial
    no hint is given (give the VM's root disk a ``serial`` to get one)."""
    disks = storage_disks(doc)
    if disks and disks[0].get("serial"):
        return {"serialNumber": disks[0]["serial"]}
    return {}


def selected(store: Store, namespaces: list[str], selector: str) -> list[dict]:
    requirements = parse_selector(selector)
    docs = store.get_systems(store.system_ids())
    return sorted(
        (
            d
            for d in docs
            if (not namespaces or d.get("namespace") in namespaces)
            and matches(requirements, d.get("labels") or {})
        ),
        key=lambda d: (d.get("namespace", ""), d.get("name", "")),
    )


def host_names(docs: list[dict]) -> list[str]:
    """The VM name, or namespace-name where two namespaces hold the same name."""
    names = [d.get("name", "") for d in docs]
    return [
        f"{d.get('namespace')}-{n}" if names.count(n) > 1 else n
        for d, n in zip(docs, names, strict=True)
    ]


def install_config(docs, names, args, password) -> dict:
    hosts = []
    for doc, name in zip(docs, names, strict=True):
        bmc = {
            "address": bmc_address(args.endpoint, doc["id"]),
            "username": args.username,
            "password": password,
        }
        if args.disable_certificate_verification:
            bmc["disableCertificateVerification"] = True
        host = {
            "name": name,
            "role": role(doc, args.role_label, re.compile(args.master_pattern)),
            "bmc": bmc,
            "bootMACAddress": _mac(doc),
            "bootMode": boot_mode(doc),
        }
        hints = root_device_hints(doc)
        if hints:
            host["rootDeviceHints"] = hints
        hosts.append(host)
    return {"platform": {"baremetal": {"hosts": hosts}}}


def baremetalhosts(docs, names, args, password) -> list[dict]:
    manifests = []
    for doc, name in zip(docs, names, strict=True):
        secret = f"{name}-bmc-secret"
        manifests.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": secret, "namespace": args.bmh_namespace},
                "type": "Opaque",
                "stringData": {"username": args.username, "password": password},
            }
        )
        bmc = {"address": bmc_address(args.endpoint, doc["id"]), "credentialsName": secret}
        if args.disable_certificate_verification:
            bmc["disableCertificateVerification"] = True
        spec = {
            "online": True,
            "bootMACAddress": _mac(doc),
            "bootMode": boot_mode(doc),
            "bmc": bmc,
        }
        hints = root_device_hints(doc)
        if hints:
            spec["rootDeviceHints"] = hints
        manifests.append(
            {
                "apiVersion": "metal3.io/v1alpha1",
                "kind": "BareMetalHost",
                "metadata": {
                    "name": name,
                    "namespace": args.bmh_namespace,
                    "labels": {
                        "fleetfish.io/role": role(
                            doc, args.role_label, re.compile(args.master_pattern)
                        )
                    },
                    "annotations": {"fleetfish.io/system": doc["id"]},
                },
                "spec": spec,
            }
        )
    return manifests


def _mac(doc: dict) -> str:
    interfaces = doc.get("interfaces") or []
    return (interfaces[0].get("macAddress") or "").lower() if interfaces else ""


def run(args: argparse.Namespace) -> int:
    password = args.password or os.environ.get(args.password_env, "")
    if not password:
        print(
            f"fleetfish hosts: give the BMC password in ${args.password_env} or --password",
            file=sys.stderr,
        )
        return 2
    try:
        re.compile(args.master_pattern)
        parse_selector(args.selector)
        bmc_address(args.endpoint, "x")
    except (ValueError, re.error) as exc:
        print(f"fleetfish hosts: {exc}", file=sys.stderr)
        return 2
    store = Store.from_url(args.redis_url)
    docs = selected(store, args.namespace, args.selector)
    names = host_names(docs)
    for doc, name in zip(docs, names, strict=True):
        if not _mac(doc):
            print(f"fleetfish hosts: {doc['id']} has no interface MAC", file=sys.stderr)
        if not root_device_hints(doc):
            print(
                f"fleetfish hosts: {name}: root disk has no serial, no rootDeviceHints",
                file=sys.stderr,
            )
    if args.format == "install-config":
        yaml.safe_dump(install_config(docs, names, args, password), sys.stdout, sort_keys=False)
    else:
        yaml.safe_dump_all(baremetalhosts(docs, names, args, password), sys.stdout, sort_keys=False)
    return 0
