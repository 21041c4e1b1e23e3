"""One benchmark run: a lab (or the sushy-tools emulator) with N nodes, Ironic's sequence on all
of them at once, and every per-node observation gathered into one result dict."""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from pathlib import Path

from bench.observe import (
    ClusterTimeline,
    boots,
    first_boot_by_vm,
    kube_requests,
    requests_between,
)
from bench.sampler import CpuAccount, RedisOps, RequestCounter, RssSampler, process_tree
from bench.stats import summary
from bench.sushytools import SushyEmulator
from bench.throttle import ThrottledIsoServer
from bench.wire import WireCapture, action_seconds
from lab.ironic import IronicLike
from lab.stack import LAB_NAMESPACE, LabConfig, LabStack

log = logging.getLogger("fleetfish.bench")

FLEETFISH = "fleetfish"
SEQUENTIAL = "sequential"
SUSHY_TOOLS = "sushy-tools"
MODES = (FLEETFISH, SEQUENTIAL, SUSHY_TOOLS)
# Metal3/OpenShift's power_state_change_timeout: how long Ironic polls for PowerState On.
POWER_TIMEOUT_S = 120
FLEETFISH_PROCESSES = ("api", "watcher")  # plus every worker*
SERVICE_TIER = ("api", "redis")
FLEET_CPU = (
    "api",
    "watcher",
    "redis",
)  # plus every worker*: what fleetfish itself costs  # on the path of every Redfish call
CLIENT = "ironic client"  # the bench process itself, in the CPU accounting


def lab_vm_names(count: int) -> list[str]:
    """The simulator's VM names, as an IPI cluster names them (see docs/architecture.md)."""
    masters = [f"ostest-master-{i}" for i in range(min(count, 3))]
    return masters + [f"ostest-worker-{i}" for i in range(max(0, count - 3))]


def _rel(value: float, origin: float) -> float | None:
    return round(value - origin, 3) if value else None


def _wait_for_cluster(stack, timeline, names, started, deadline) -> dict[str, dict]:
    """Poll until every VM booted and has its ISO attached, or until ``deadline`` (epoch)."""
    first: dict[str, dict] = {}
    while True:
        first = first_boot_by_vm(boots(stack.kube_url, since=started - 1))
        done = all(n in first and n in timeline.attached for n in names)
        if done or time.time() >= deadline:
            return first
        time.sleep(0.5)


def _latencies(nodes: list[dict]) -> dict:
    def pairs(a, b):
        return [n[b] - n[a] for n in nodes if n.get(a) is not None and n.get(b) is not None]

    return {
        "insert": summary(pairs("insert_requested", "insert_answered")),
        "reset": summary(pairs("reset_requested", "reset_answered")),
        "media_to_power_on": summary(pairs("media_attached", "power_on_requested")),
    }


def run_lab_mode(
    mode: str,
    count: int,
    import_seconds: float,
    workers: int,
    work_dir: Path,
    max_wait: float,
    watcher_in_workers: bool = False,
    api_workers: int = 2,
    service_cpus: int = 0,
    worker_parent: bool = False,
) -> dict:
    """fleetfish as shipped, or its documented legacy mode (one worker, no chord)."""
    sequential = mode == SEQUENTIAL
    # Named only when asked for: bench.compare runs this bench/ against the reference's lab,
    # whose LabConfig has no worker_parent.
    layout = {"worker_parent": True} if worker_parent else {}
    config = LabConfig.for_tests(
        work_dir / f"{mode}-n{count}",
        vms=count,
        import_seconds=import_seconds,
        workers=1 if sequential else workers,
        legacy_sequential=sequential,
        flower=False,
        watcher_in_workers=watcher_in_workers,
        api_workers=api_workers,
        **layout,
    )
    stack = LabStack(config)
    affinity = os.sched_getaffinity(0)
    stack.start(timeout=120 + count)
    try:
        names = lab_vm_names(count)
        images = {f"{LAB_NAMESPACE}.{n}": f"{stack.iso_url}/images/boot-{n}.iso" for n in names}
        pids = {
            name: proc.pid
            for name, proc in stack.procs.items()
            if name in FLEETFISH_PROCESSES or name.startswith("worker")
        }
        requests_seen = RequestCounter(stack.logs_dir / "api.log", f"{stack.redfish_url}/metrics")
        redis_ops = RedisOps(stack.redis_url)
        timeline = ClusterTimeline(stack.kube_url, LAB_NAMESPACE)
        user, password = stack.credentials
        ironic = IronicLike(stack.redfish_url, user, password)
        everyone = {name: proc.pid for name, proc in stack.procs.items()}
        if stack.redis and stack.redis.proc:
            everyone["redis"] = stack.redis.proc.pid
        pinned = pin_service(everyone, service_cpus) if service_cpus else None
        cpu = CpuAccount(everyone, own=CLIENT)
        # The whole provisioning, calls and the media work after them, for the cost per node.
        fleet_cpu = CpuAccount(
            {k: v for k, v in everyone.items() if k in FLEET_CPU or k.startswith("worker")}
        )
        requests_seen.start()
        redis_ops.start()
        wire = WireCapture(stack.config.api_port, work_dir / f"{mode}-n{count}" / "api.pcap")
        with RssSampler(pids) as rss, wire:
            kube_before = kube_requests(stack.kube_url)
            started = time.time()
            cpu.start()
            fleet_cpu.start()
            runs = ironic.provision_all(images, power_timeout=POWER_TIMEOUT_S)
            cpu_used = cpu.stop()
            provisioned = time.time()
            first = _wait_for_cluster(stack, timeline, names, started, started + max_wait)
            ended = time.time()
            fleet_used = fleet_cpu.stop()
            kube_used = requests_between(kube_before, kube_requests(stack.kube_url))
        timeline.stop()
        cost = requests_seen.stop()
        ops = redis_ops.stop()
    finally:
        stack.stop()
        os.sched_setaffinity(0, affinity)  # --service-cpus narrowed it for this run only

    nodes = []
    for run in runs:
        vm = run.system_id.split(".", 1)[1]
        boot = first.get(vm, {})
        nodes.append(
            {
                "node": vm,
                "system_id": run.system_id,
                "image": run.image,
                "insert_requested": run.insert_requested or None,
                "insert_answered": run.insert_answered or None,
                "reset_requested": run.reset_requested or None,
                "reset_answered": run.reset_answered or None,
                "media_attached": timeline.attached.get(vm),
                "power_on_requested": timeline.started.get(vm),
                "vmi_started": timeline.vmi_created.get(vm),
                "boot_time": boot.get("time"),
                "boot_device": boot.get("kind", "none booted"),
                "boot_image_ok": bool(boot) and boot.get("image_url") == run.image,
                "power_state_seen": run.power_state,
                "power_on_seen": run.power_on_seen or None,
                "error": run.error,
            }
        )
    result = _summarise(mode, count, import_seconds, config.workers, started, ended, nodes)
    result.update(
        {
            "provision_calls_seconds": round(provisioned - started, 3),
            # How the worker side ran: the memory figures depend on it.
            "worker_parent": worker_parent,
            "watcher_in_workers": watcher_in_workers,
            "peak_rss": rss.as_dict(),
            "requests": cost,
            "redis_ops": ops,
            "redis_ops_by_command": redis_ops.by_command,
            "server_side": {
                name: summary(times) for name, times in requests_seen.server_seconds.items()
            },
            "on_the_wire": _wire_summary(wire),
            "cpu_during_calls": cpu_used,
            "cpu_whole_run": fleet_used,
            "kube_requests": kube_used,
            "service_cpus": pinned,
        }
    )
    return result


def pin_service(pids: dict[str, int], cpus_wanted: int) -> dict[str, list[int]]:
    """Give the service tier every call goes through (the API and Redis) ``cpus_wanted`` CPUs
    of its own, and everything else (this client, the simulator, the workers) the rest: as in
    a deployment, where Ironic and the cluster do not run on the API's and Redis's cores.
    Returns the split."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) <= cpus_wanted:
        raise SystemExit(f"--service-cpus {cpus_wanted} needs more than {len(cpus)} CPUs")
    mine, rest = cpus[:cpus_wanted], cpus[cpus_wanted:]
    for name, pid in pids.items():
        for member in process_tree(pid):
            member.cpu_affinity(mine if name in SERVICE_TIER else rest)
    os.sched_setaffinity(0, rest)  # the Ironic-like client, and its threads from now on
    return {"service": mine, "others": rest}


def _wire_summary(wire: WireCapture) -> dict:
    """InsertMedia/Reset answer times from the packet capture, or why there are none."""
    if wire.problem:
        return {"unavailable": wire.problem}
    return {name: summary(times) for name, times in action_seconds(wire.exchanges()).items()}


def _summarise(mode, count, import_seconds, workers, started, ended, nodes) -> dict:
    cdrom = [n for n in nodes if n["boot_device"] == "cdrom" and n["boot_image_ok"]]
    attached = [n["media_attached"] for n in nodes if n["media_attached"]]
    makespan_boot = (
        max(n["boot_time"] for n in cdrom) - started if len(cdrom) == count and count else None
    )
    makespan_media = max(attached) - started if len(attached) == count and count else None
    projected = None
    if attached and len(attached) < count:
        # Media still queued at the deadline: extrapolate the rate seen so far.
        projected = (max(attached) - started) * count / len(attached)
    return {
        "mode": mode,
        "n": count,
        "import_seconds": import_seconds,
        "workers": workers,
        "started": started,
        "duration_seconds": round(ended - started, 3),
        "cdrom_boots": len(cdrom),
        "disk_boots": sum(1 for n in nodes if n["boot_device"] == "disk"),
        "errors": sum(1 for n in nodes if n["error"]),
        "makespan_seconds": None if makespan_boot is None else round(makespan_boot, 3),
        "media_makespan_seconds": None if makespan_media is None else round(makespan_media, 3),
        "media_makespan_projected_seconds": None if projected is None else round(projected, 1),
        "media_attached": len(attached),
        "latency": _latencies(nodes),
        "nodes": [
            {k: (_rel(v, started) if k in _TIMES else v) for k, v in node.items()} for node in nodes
        ],
    }


_TIMES = {
    "insert_requested",
    "insert_answered",
    "reset_requested",
    "reset_answered",
    "media_attached",
    "power_on_requested",
    "vmi_started",
    "boot_time",
    "power_on_seen",
}


def run_sushy_tools(count: int, import_seconds: float, work_dir: Path, attempts: int) -> dict:
    """The reference emulator: its InsertMedia downloads the image (here taking T) in the request."""
    import bcrypt

    password = secrets.token_urlsafe(12)
    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(10)).decode()
    run_dir = work_dir / f"sushy-tools-n{count}"
    with (
        ThrottledIsoServer(import_seconds) as iso,
        SushyEmulator(run_dir, count, "admin", digest) as emu,
    ):
        ironic = IronicLike(emu.url, "admin", password)
        # Ironic's sushy re-POSTs a timed-out InsertMedia up to 10 times; fewer attempts keep a
        # T > 60 s run bounded (the report states the count used).
        ironic.client._conn._server_side_retries = attempts
        images = {sid: iso.url_for(f"boot-{i}") for i, sid in enumerate(emu.system_ids)}
        requests_seen = RequestCounter(run_dir / "sushy-emulator.log", "")
        requests_seen.start()
        cpu = CpuAccount({"sushy-emulator": emu.proc.pid}, own=CLIENT)
        wire = WireCapture(emu.port, run_dir / "api.pcap")
        with RssSampler({"sushy-emulator": emu.proc.pid}) as rss, wire:
            started = time.time()
            cpu.start()
            runs = ironic.provision_all(images, power_timeout=POWER_TIMEOUT_S)
            cpu_used = cpu.stop()
            ended = time.time()
        downloads = iso.downloads
        cost = requests_seen.stop()
    nodes = [
        {
            "node": run.system_id,
            "system_id": run.system_id,
            "insert_requested": run.insert_requested or None,
            "insert_answered": run.insert_answered or None,
            "reset_requested": run.reset_requested or None,
            "reset_answered": run.reset_answered or None,
            "media_attached": run.insert_answered if not run.error else None,
            "power_on_requested": None,
            "vmi_started": None,
            "boot_time": None,
            "boot_device": "n/a (fake driver)",
            "boot_image_ok": False,
            "power_state_seen": run.power_state,
            "power_on_seen": run.power_on_seen or None,
            "error": run.error,
        }
        for run in runs
    ]
    result = _summarise(SUSHY_TOOLS, count, import_seconds, 1, started, ended, nodes)
    done = [n["power_on_seen"] for n in result["nodes"] if n["power_on_seen"] is not None]
    result.update(
        {
            # No boot records: "done" is the last PowerState On Ironic's poller saw.
            "makespan_seconds": max(done) if len(done) == count and not result["errors"] else None,
            "image_downloads": downloads,
            "sushy_attempts": attempts,
            "peak_rss": rss.as_dict(),
            "requests": cost,
            "redis_ops": None,
            "on_the_wire": _wire_summary(wire),
            "cpu_during_calls": cpu_used,
        }
    )
    return result


def save(result: dict, path: Path) -> None:
    path.write_text(json.dumps(result, indent=2, sort_keys=True))
