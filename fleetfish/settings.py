"""Every fleetfish setting, read once from the environment (documented in docs/configuration.md)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

N = TypeVar("N", int, float)


ON = ("1", "true", "yes", "on")
OFF = ("0", "false", "no", "off")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def env_switch(env: Mapping[str, str], name: str, default: bool) -> bool:
    """An on/off setting; a value that is neither is refused, naming the variable.

    Reading an unknown spelling as off would turn a safety switch (FLEETFISH_REQUIRE_TLS)
    off without a word.
    """
    value = env.get(name, "").strip().lower()
    if not value:
        return default
    if value in ON or value in OFF:
        return value in ON
    raise ValueError(
        f"{name} must be one of {', '.join(ON)} (on) or {', '.join(OFF)} (off), not {env[name]!r}"
    )


def env_number(env: Mapping[str, str], name: str, default: N, kind: type[N] = int) -> N:
    """A numeric setting; a value that is not a number is refused, naming the variable."""
    value = env.get(name, "").strip()
    if not value:
        return default
    try:
        return kind(value)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise ValueError(f"{name} must be {what}, not {value!r}") from None


def _list(value: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


@dataclass(frozen=True)
class Settings:
    """Configuration shared by the API, the workers and the watcher.

    Each field maps to one environment variable; ``from_env`` is the only constructor the
    services use, tests build instances directly.
    """

    def __post_init__(self) -> None:
        if self.log_level not in LOG_LEVELS:
            raise ValueError(
                f"FLEETFISH_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, not {self.log_level!r}"
            )
        if self.task_result_ttl <= self.import_timeout:
            raise ValueError(
                f"FLEETFISH_TASK_RESULT_TTL ({self.task_result_ttl} s) must be longer than "
                f"FLEETFISH_IMPORT_TIMEOUT ({self.import_timeout} s): a Redfish task would "
                "expire while its import still runs"
            )

    redis_url: str = "redis://127.0.0.1:6379/0"
    # Redfish API
    bind: str = "127.0.0.1"
    port: int = 8000
    users_file: str = ""
    session_timeout: int = 1800
    tls_cert: str = ""
    tls_key: str = ""
    # Refuse credentials (Basic, session login, tokens) on requests that did not come over HTTPS.
    require_tls: bool = False
    max_body_bytes: int = 64 * 1024
    # Share of each API process's time that bcrypt checks of new credentials may take (0: no cap).
    bcrypt_share: float = 0.2
    # A PATCH of a Manager's DateTime this close to the service clock (seconds) is accepted.
    clock_tolerance: int = 300
    # Cluster selection (workers and watcher)
    kubeconfig: str = ""
    namespaces: tuple[str, ...] = ()
    label_selector: str = ""
    # Media pipeline
    image_allowlist: tuple[str, ...] = ()
    # Without an allow-list, refused on top of the built-in ones (fleetfish/image_policy.py):
    # Flower, other internal services, the cluster's service and pod CIDRs.
    image_deny: tuple[str, ...] = ()
    # Set by the kubelet in every pod: the cluster API's service address, refused as an image host.
    kubernetes_service_host: str = ""
    import_timeout: int = 1800
    import_poll_seconds: float = 1.0
    # Polls of a long import space out up to this, aiming at half its estimated remaining time.
    import_poll_max_seconds: float = 10.0
    # While no DataVolume watch runs (its mirror silent for 60 s), an import reads its
    # DataVolume from the cluster this often.
    dv_fallback_seconds: float = 15.0
    dv_size_margin: float = 1.3
    dv_min_size_mib: int = 64
    dv_storage_class: str = ""
    # A ConfigMap (in each VM's namespace) of CA certificates every https import trusts.
    image_ca_configmap: str = ""
    # Whether a VirtualMedia may be set to VerifyCertificate false (its imports then trust
    # whatever certificate the image server presents).
    media_allow_unverified: bool = False
    cdrom_disk: str = "cdrom"
    # A started VM that is not running after this many seconds is stopped and reported.
    power_on_timeout: int = 300
    # Entries kept in each system's event log (older ones are dropped).
    event_log_entries: int = 200
    # Reproduces the service fleetfish replaces: media work serialised, Reset never deferred.
    legacy_sequential: bool = False
    # Run the watcher role inside each worker process instead of a separate watcher process.
    worker_watch: bool = False
    # Celery
    visibility_timeout: int = 60
    # Redfish tasks, Celery results and their markers: nothing reads a task back once it ended
    # (sushy never polls the InsertMedia task; the event log keeps each system's story), so they
    # only need to outlive the longest task. Redis holds about 13 KiB per provisioning cycle
    # for this long.
    task_result_ttl: int = 7200
    # Workers send Celery task events from the start (otherwise only once Flower, or
    # ``celery control enable_events``, asks for them).
    task_events: bool = False
    log_level: str = "INFO"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        e = os.environ if env is None else env
        return cls(
            redis_url=e.get("REDIS_URL") or cls.redis_url,
            bind=e.get("FLEETFISH_BIND", cls.bind),
            port=env_number(e, "FLEETFISH_PORT", cls.port),
            users_file=e.get("FLEETFISH_USERS_FILE", ""),
            session_timeout=env_number(e, "FLEETFISH_SESSION_TIMEOUT", cls.session_timeout),
            tls_cert=e.get("FLEETFISH_TLS_CERT", ""),
            tls_key=e.get("FLEETFISH_TLS_KEY", ""),
            require_tls=env_switch(e, "FLEETFISH_REQUIRE_TLS", False),
            max_body_bytes=env_number(e, "FLEETFISH_MAX_BODY_BYTES", cls.max_body_bytes),
            bcrypt_share=env_number(e, "FLEETFISH_BCRYPT_SHARE", cls.bcrypt_share, float),
            clock_tolerance=env_number(e, "FLEETFISH_CLOCK_TOLERANCE", cls.clock_tolerance),
            kubeconfig=e.get("FLEETFISH_KUBECONFIG") or e.get("KUBECONFIG", ""),
            namespaces=_list(e.get("FLEETFISH_NAMESPACES")),
            label_selector=e.get("FLEETFISH_LABEL_SELECTOR", ""),
            image_allowlist=_list(e.get("FLEETFISH_IMAGE_ALLOWLIST")),
            image_deny=_list(e.get("FLEETFISH_IMAGE_DENY")),
            kubernetes_service_host=e.get("KUBERNETES_SERVICE_HOST", ""),
            import_timeout=env_number(e, "FLEETFISH_IMPORT_TIMEOUT", cls.import_timeout),
            import_poll_seconds=env_number(
                e, "FLEETFISH_IMPORT_POLL_SECONDS", cls.import_poll_seconds, float
            ),
            import_poll_max_seconds=env_number(
                e, "FLEETFISH_IMPORT_POLL_MAX_SECONDS", cls.import_poll_max_seconds, float
            ),
            dv_fallback_seconds=env_number(
                e, "FLEETFISH_DV_FALLBACK_SECONDS", cls.dv_fallback_seconds, float
            ),
            dv_size_margin=env_number(e, "FLEETFISH_DV_SIZE_MARGIN", cls.dv_size_margin, float),
            dv_min_size_mib=env_number(e, "FLEETFISH_DV_MIN_SIZE_MIB", cls.dv_min_size_mib),
            dv_storage_class=e.get("FLEETFISH_DV_STORAGE_CLASS", ""),
            image_ca_configmap=e.get("FLEETFISH_IMAGE_CA_CONFIGMAP", ""),
            media_allow_unverified=env_switch(e, "FLEETFISH_MEDIA_ALLOW_UNVERIFIED", False),
            cdrom_disk=e.get("FLEETFISH_CDROM_DISK", cls.cdrom_disk),
            power_on_timeout=env_number(e, "FLEETFISH_POWER_ON_TIMEOUT", cls.power_on_timeout),
            event_log_entries=env_number(e, "FLEETFISH_EVENT_LOG_ENTRIES", cls.event_log_entries),
            legacy_sequential=env_switch(e, "FLEETFISH_LEGACY_SEQUENTIAL", False),
            worker_watch=env_switch(e, "FLEETFISH_WORKER_WATCH", False),
            visibility_timeout=env_number(
                e, "FLEETFISH_VISIBILITY_TIMEOUT", cls.visibility_timeout
            ),
            task_result_ttl=env_number(e, "FLEETFISH_TASK_RESULT_TTL", cls.task_result_ttl),
            task_events=env_switch(e, "FLEETFISH_TASK_EVENTS", False),
            log_level=e.get("FLEETFISH_LOG_LEVEL", cls.log_level).upper(),
        )
