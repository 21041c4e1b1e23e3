"""Ironic's per-node redfish-virtual-media sequence, played with sushy (Ironic's own client).

One `IronicLike` holds one sushy client (one session) per BMC address, as Ironic's conductor
does, and `provision_all` runs the deploy sequence of every node concurrently without waiting
between steps, which is exactly the load that broke single-worker KubeVirt BMCs.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import sushy
from sushy import auth as sushy_auth

log = logging.getLogger("fleetfish.lab.ironic")

GiB = 2**30
# Ironic's redfish inspect interface: sushy's names -> the node properties it writes.
CPU_ARCH = {sushy.PROCESSOR_ARCH_x86: "x86_64", sushy.PROCESSOR_ARCH_ARM: "arm"}
BOOT_MODES = {sushy.BOOT_SOURCE_MODE_UEFI: "uefi", sushy.BOOT_SOURCE_MODE_BIOS: "bios"}

# Ironic polls PowerState at roughly these offsets (seconds) after Reset.
POWER_POLL_OFFSETS = (1.0, 2.5, 4.8, 8.0, 13.0, 21.0, 32.0, 49.0, 70.0, 95.0, 120.0)


@dataclass
class NodeRun:
    """Timestamps (epoch seconds) and outcomes of one node's sequence."""

    system_id: str
    image: str
    insert_requested: float = 0.0
    insert_answered: float = 0.0
    reset_requested: float = 0.0
    reset_answered: float = 0.0
    power_on_seen: float = 0.0
    power_state: str = ""
    error: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


class IronicLike:
    def __init__(self, base_url: str, username: str, password: str, verify: bool = False):
        self.client = sushy.Sushy(
            f"{base_url.rstrip('/')}/redfish/v1/",
            auth=sushy_auth.SessionOrBasicAuth(username=username, password=password),
            verify=verify,
        )
        self._lock = threading.Lock()

    def close(self) -> None:
        """Log the Redfish session out now. Left to sushy's finalizer, the logout happens at
        whatever garbage collection frees the client (it sits in reference cycles), in the
        middle of someone else's calls."""
        auth, self.client._auth = self.client._auth, None
        if auth is not None:
            try:
                auth.close()
            except Exception as error:  # the service may be gone already; nothing to undo
                log.info("Redfish session logout failed: %s", error)

    def __enter__(self) -> IronicLike:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def system(self, system_id: str):
        return self.client.get_system(f"/redfish/v1/Systems/{system_id}")

    def inspect(self, system_id: str) -> dict:
        """What Ironic's ``redfish`` inspect interface learns about a node: the same sushy reads
        and the same arithmetic (``local_gb``: the smallest disk of at least 4 GiB, from
        SimpleStorage and from Storage volumes, else drives; in GiB, minus one)."""
        system = self.system(system_id)
        found: dict = {}
        if system.memory_summary and system.memory_summary.size_gib:
            found["memory_mb"] = int(system.memory_summary.size_gib * 1024)
        if system.processors and system.processors.summary:
            cpus, arch = system.processors.summary
            found["cpus"] = cpus
            found["cpu_arch"] = CPU_ARCH.get(arch)
        found["boot_mode"] = BOOT_MODES.get(system.boot.mode)

        def smallest_usable(read) -> int:
            try:
                sizes = read()
            except sushy.exceptions.SushyError:  # Ironic logs these and goes on
                return 0
            return next((s for s in sizes or [] if s >= 4 * GiB), 0)

        simple = smallest_usable(lambda: system.simple_storage.disks_sizes_bytes)
        storage = smallest_usable(lambda: system.storage.volumes_sizes_bytes)
        if not storage:
            storage = smallest_usable(lambda: system.storage.drives_sizes_bytes)
        size = min(simple, storage) if simple and storage else max(simple, storage)
        found["local_gb"] = max(0, int(size / GiB - 1))
        # Ironic creates a port for each enabled NIC.
        found["macs"] = sorted(
            mac
            for mac, state in (system.ethernet_interfaces.summary or {}).items()
            if state == sushy.STATE_ENABLED
        )
        return found

    def _cd_media(self, system):
        """The first CD/DVD slot, looked up under the Manager as older Ironic does."""
        for manager in system.managers:
            for media in manager.virtual_media.get_members():
                types = {t.value if hasattr(t, "value") else t for t in media.media_types}
                if types & {"CD", "DVD"}:
                    return media
        raise RuntimeError(f"{system.identity}: no CD/DVD virtual media")

    def power_off(self, system, timeout: float = 60.0) -> None:
        if system.power_state == sushy.PowerState.OFF:
            return
        system.reset_system(sushy.ResetType.FORCE_OFF)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            system.refresh()
            if system.power_state == sushy.PowerState.OFF:
                return
            time.sleep(0.5)
        raise TimeoutError(f"{system.identity} did not power off")

    def eject(self, system) -> None:
        """Ironic's eject before a new insert, and after a boot from virtual media."""
        media = self._cd_media(system)
        if media.inserted:
            media.eject_media()

    def _power_on(self, system, run: NodeRun, power_timeout: float) -> None:
        run.reset_requested = time.time()
        system.reset_system(sushy.ResetType.ON)
        run.reset_answered = time.time()
        start = time.monotonic()
        for offset in POWER_POLL_OFFSETS:
            if offset > power_timeout:
                break
            time.sleep(max(0.0, start + offset - time.monotonic()))
            system.refresh()
            run.power_state = system.power_state.value
            if system.power_state in (sushy.PowerState.ON, sushy.PowerState.POWERING_ON):
                run.power_on_seen = time.time()
                return
        run.error = f"power state still {run.power_state} after {power_timeout}s"

    def provision(self, system_id: str, image: str, power_timeout: float = 120.0) -> NodeRun:
        """One boot from virtual media, as Ironic does for inspection, cleaning, deployment and
        rebuild: power off, eject, insert (no pause in between), UEFI, Cd once, On."""
        run = NodeRun(system_id=system_id, image=image)
        try:
            system = self.system(system_id)
            self.power_off(system)
            self.eject(system)
            run.insert_requested = time.time()
            self._cd_media(system).insert_media(image)
            run.insert_answered = time.time()
            system.refresh()
            if system.boot.mode != sushy.BootSourceOverrideMode.UEFI:
                system.set_system_boot_options(mode=sushy.BootSourceOverrideMode.UEFI)
            system.set_system_boot_options(
                target=sushy.BootSource.CD, enabled=sushy.BootSourceOverrideEnabled.ONCE
            )
            self._power_on(system, run, power_timeout)
        except Exception as exc:  # noqa: BLE001 - a failed node is a result, not a crash
            log.warning("%s: %s", system_id, exc)
            run.error = f"{type(exc).__name__}: {exc}"
        return run

    def boot_from_disk(self, system_id: str, power_timeout: float = 120.0) -> NodeRun:
        """The end of a deployment: eject, Hdd Continuous, power cycle into the installed disk."""
        run = NodeRun(system_id=system_id, image="")
        try:
            system = self.system(system_id)
            self.eject(system)
            system.set_system_boot_options(
                target=sushy.BootSource.HDD, enabled=sushy.BootSourceOverrideEnabled.CONTINUOUS
            )
            self.power_off(system)
            self._power_on(system, run, power_timeout)
        except Exception as exc:  # noqa: BLE001 - a failed node is a result, not a crash
            log.warning("%s: %s", system_id, exc)
            run.error = f"{type(exc).__name__}: {exc}"
        return run

    def provision_all(self, images: dict[str, str], power_timeout: float = 120.0) -> list[NodeRun]:
        """Run every node's sequence at once, like an IPI install of the whole cluster."""
        with ThreadPoolExecutor(max_workers=max(1, min(len(images), 64))) as pool:
            futures = [
                pool.submit(self.provision, sid, image, power_timeout)
                for sid, image in images.items()
            ]
            return [f.result() for f in futures]

    def boot_all_from_disk(
        self, system_ids: list[str], power_timeout: float = 120.0
    ) -> list[NodeRun]:
        with ThreadPoolExecutor(max_workers=max(1, min(len(system_ids), 64))) as pool:
            futures = [pool.submit(self.boot_from_disk, sid, power_timeout) for sid in system_ids]
            return [f.result() for f in futures]
