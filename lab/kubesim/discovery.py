"""Discovery documents (/version, /api, /apis, /apis/{group}/{version}) for DynamicClient."""

from __future__ import annotations

from lab.kubesim.kinds import ALL, SUBRESOURCES, VERBS, Kind

VERSION = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.0-kubesim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.24.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

SUBRESOURCE_GROUP = "subresources.kubevirt.io"


def _resource(kind: Kind) -> list[dict]:
    main = {
        "name": kind.plural,
        "singularName": kind.singular,
        "namespaced": kind.namespaced,
        "kind": kind.kind,
        "verbs": VERBS,
        "shortNames": list(kind.short_names),
    }
    out = [main]
    if kind.has_status:
        out.append(
            {
                "name": f"{kind.plural}/status",
                "singularName": "",
                "namespaced": kind.namespaced,
                "kind": kind.kind,
                "verbs": ["get", "patch", "update"],
            }
        )
    return out


def api_versions() -> dict:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    }


def groups() -> list[tuple[str, str]]:
    found = {(k.group, k.version) for k in ALL if k.group}
    return sorted(found) + [(SUBRESOURCE_GROUP, "v1")]


def api_group_list() -> dict:
    out = []
    for group, version in groups():
        gv = {"groupVersion": f"{group}/{version}", "version": version}
        out.append({"name": group, "versions": [gv], "preferredVersion": gv})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": out}


def resource_list(group: str, version: str) -> dict | None:
    if group == SUBRESOURCE_GROUP and version == "v1":
        resources = []
        for plural, actions in SUBRESOURCES.items():
            kind = "VirtualMachine" if plural == "virtualmachines" else "VirtualMachineInstance"
            for action in actions:
                resources.append(
                    {
                        "name": f"{plural}/{action}",
                        "singularName": "",
                        "namespaced": True,
                        "kind": kind,
                        "verbs": ["update"],
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}",
            "resources": resources,
        }
    kinds = [k for k in ALL if k.group == group and k.version == version]
    if not kinds:
        return None
    resources = [r for k in kinds for r in _resource(k)]
    gv = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": resources,
    }
