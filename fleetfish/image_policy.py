"""Which image hosts fleetfish may fetch from: the allow-list, or else the built-in refusals.

Pure functions with no Flask or Kubernetes import, so the API (InsertMedia) and the workers
apply one rule. Host names are never resolved here: a listed name matches itself only.
"""

from __future__ import annotations

import functools
import ipaddress
from urllib.parse import urlsplit

from fleetfish.settings import Settings

# Refused without an allow-list: the cloud metadata service and every other link-local address,
# loopback (the Redis/API/Flower of a single host listen there) and the unspecified address
# (which most stacks treat as this host).
DEFAULT_DENY_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "169.254.0.0/16",
        "fe80::/10",
        "127.0.0.0/8",
        "::1/128",
        "0.0.0.0/8",
        "::/128",
    )
)
# Names that always mean this host or the metadata service.
DEFAULT_DENY_NAMES = ("localhost", ".localhost", "metadata.google.internal")


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP a literal host names (an IPv4-mapped IPv6 literal is its IPv4 address)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    return getattr(address, "ipv4_mapped", None) or address


@functools.lru_cache(maxsize=256)
def _network(entry: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """The network a list entry names (None for a host name); cached: the lists are fixed and
    parsing them took a tenth of an InsertMedia's CPU."""
    try:
        return ipaddress.ip_network(_norm(entry), strict=False)
    except ValueError:
        return None


def _norm(host: str) -> str:
    return host.strip().lower().rstrip(".").strip("[]")


def host_allowed(host: str, allowlist: tuple[str, ...]) -> bool:
    """Allow-list match: host names (".example.com" also matches subdomains) or CIDRs.

    CIDRs match IP-literal hosts only: a name is allowed only when it is listed itself
    (whatever address it resolves to later).
    """
    host = _norm(host)
    address = _address(host)
    for raw in allowlist:
        entry = raw.strip().lower()
        if not entry:
            continue
        if address is not None:
            network = _network(entry)
            if network is None:
                continue
            if address.version == network.version and address in network:
                return True
            continue
        entry = entry.rstrip(".")
        if host == entry or (entry.startswith(".") and host.endswith(entry)):
            return True
    return False


def _service_name_match(host: str, name: str) -> bool:
    """``name`` itself, or its in-cluster forms (name.namespace.svc[.cluster.local])."""
    if host == name:
        return True
    labels = host.split(".")
    return "." not in name and labels[0] == name and "svc" in labels[2:3]


@functools.lru_cache(maxsize=8)
def own_addresses(settings: Settings) -> tuple[str, ...]:
    """Hosts of fleetfish's own services: Redis (REDIS_URL), the API's bind address, and
    FLEETFISH_IMAGE_DENY (Flower, the cluster's API service, service and pod CIDRs...)."""
    hosts = list(settings.image_deny)
    try:
        redis_host = urlsplit(settings.redis_url).hostname
    except ValueError:
        redis_host = None
    for host in (redis_host, settings.bind, settings.kubernetes_service_host):
        if host:
            hosts.append(_norm(host))
    return tuple(hosts)


# A pure function of its arguments (no name lookups), asked on every InsertMedia for the same
# few image hosts; bounded, as the hosts come from requests.
@functools.lru_cache(maxsize=1024)
def refusal(host: str, settings: Settings) -> str:
    """Why fleetfish will not fetch from ``host`` ('' when it may).

    With FLEETFISH_IMAGE_ALLOWLIST set, only listed hosts are allowed (a listed loopback or
    link-local entry allows it). Without it, any host except the built-in refusals.
    """
    if settings.image_allowlist:
        if host_allowed(host, settings.image_allowlist):
            return ""
        return "not in FLEETFISH_IMAGE_ALLOWLIST"
    name = _norm(host)
    address = _address(name)
    if address is not None:
        for network in DEFAULT_DENY_NETWORKS:
            if address.version == network.version and address in network:
                return f"in {network} (link-local, loopback or unspecified)"
    elif host_allowed(name, DEFAULT_DENY_NAMES):
        return "a name for this host or the metadata service"
    for entry in own_addresses(settings):
        if host_allowed(name, (entry,)) or (address is None and _service_name_match(name, entry)):
            return f"an address of fleetfish or its cluster ({entry})"
    return ""
