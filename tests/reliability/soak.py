"""Soak: Ironic's lifecycle on every VM for a while, with random worker SIGKILLs, then a report.

``python -m tests.reliability.soak --minutes 30 --vms 20`` starts a lab and plays on each VM
(concurrently) what Ironic does between inspection, cleaning, deployment and rebuild: ForceOff,
EjectMedia, a random pause (zero half of the time), new bytes behind the node's one URL
(``boot-<vm>.iso``), InsertMedia of that same URL, boot Cd once, Reset On, wait for the boot;
now and then a deployment's end instead (eject, Hdd continuous, power cycle into the disk).
It SIGKILLs a random worker now and then (bounded; ``--max-kills 0`` for none) and starts it
again, and samples the RSS and PSS of every fleetfish process (gunicorn's and Celery's child
processes each apart) and what Redis holds; ``--live`` prints each sample as it is taken.
It reports cycles, boots, lost (no boot), stuck (PoweringOn past the
power-on bound), stale (booted older bytes than the URL served at insert), duplicated boots and
orphan DataVolumes/PVCs at the end; the exit status is 0 only when all of those are 0.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import requests

from bench.interrupt import stop_on_sigterm
from bench.sampler import process_memory
from fleetfish.store import Store
from lab.stack import LAB_NAMESPACE, LabConfig, LabStack
from tests.e2e.conftest import lab_vm_names
from tests.helpers import Redfish, boots, datavolumes, persistentvolumeclaims

FINAL = ("Completed", "Exception", "Cancelled")


@dataclass
class Cycle:
    vm: str
    image: str  # "" for a boot from the disk
    start: float
    sha256: str = ""  # what the URL served when it was inserted
    pause: float = 0.0  # between the eject and the insert
    end: float = 0.0
    booted: bool = False
    stuck: bool = False
    error: str = ""


@dataclass
class SoakReport:
    minutes: float
    vms: int
    cycles: int = 0
    cycles_ok: int = 0
    boots: int = 0
    lost: int = 0  # cycles whose boot, task or state change never came
    duplicated: int = 0  # extra boots inside a cycle, or a boot from the wrong device or URL
    stuck: int = 0  # PoweringOn for longer than the power-on bound
    stale: int = 0  # booted bytes older than what the URL served at insert
    orphans: int = 0  # DataVolumes/PVCs left at the end that no current media uses
    kills: int = 0
    errors: list[str] = field(default_factory=list)
    # Per process (gunicorn's and Celery's children apart from their parent, as ``api.1``...):
    # {"t": s, "rss": {label: MiB}, "pss": {label: MiB}, "redis_used_mib": MiB, "redis_keys": n}
    memory: list[dict] = field(default_factory=list)

    def clean(self) -> bool:
        """Nothing lost, stuck, stale, duplicated or left behind."""
        return not (self.lost or self.stuck or self.stale or self.duplicated or self.orphans)

    def rss_growth(self) -> dict[str, float]:
        """RSS MiB of each process tree between the first sample after warm-up (the second
        one) and the last."""
        if len(self.memory) < 3:
            return {}
        first, last = tree_rss(self.memory[1]), tree_rss(self.memory[-1])
        return {k: round(last[k] - first[k], 1) for k in last if k in first}


def tree_rss(sample: dict) -> dict[str, float]:
    """RSS MiB of each named process with its children (``api`` + ``api.1`` + ...)."""
    totals: dict[str, float] = {}
    for label, mib in sample["rss"].items():
        tree = label.split(".", 1)[0]
        totals[tree] = round(totals.get(tree, 0.0) + mib, 1)
    return totals


def _wait(predicate, timeout: float, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except requests.RequestException:
            value = None
        if value:
            return value
        time.sleep(interval)
    return None


class Soak:
    def __init__(
        self,
        stack: LabStack,
        minutes: float,
        max_kills: int,
        kill_every: float,
        power_on_timeout: float = 60,
    ):
        self.stack = stack
        self.deadline = time.monotonic() + minutes * 60
        self.max_kills = max_kills
        self.kill_every = kill_every
        self.vms = lab_vm_names(stack.config.vms)
        self.cycles: list[Cycle] = []
        self.report = SoakReport(minutes=minutes, vms=len(self.vms))
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.boot_timeout = stack.config.visibility_timeout * 6 + 60
        self.stuck_after = power_on_timeout + 15

    # -- one VM's loop -----------------------------------------------------------------------

    def node_loop(self, vm: str) -> None:
        rf = Redfish(self.stack, timeout=10)
        rng = random.Random(vm)
        url = f"{self.stack.iso_url}/images/boot-{vm}.iso"
        for n in range(100000):
            if time.monotonic() > self.deadline or self.stop.is_set():
                return
            # Three boots from media (inspection, cleaning, deployment), then the disk.
            from_disk = n % 4 == 3
            cycle = Cycle(vm, "" if from_disk else url, time.time())
            try:
                if from_disk:
                    self.disk_cycle(rf, cycle)
                else:
                    cycle.pause = 0.0 if rng.random() < 0.5 else rng.uniform(0.0, 3.0)
                    self.media_cycle(rf, cycle)
            except (requests.RequestException, AssertionError, KeyError, ValueError) as exc:
                cycle.error = f"{type(exc).__name__}: {exc}"
            cycle.end = time.time()
            with self.lock:
                self.cycles.append(cycle)

    def regenerate(self, vm: str) -> str:
        reply = requests.post(
            f"{self.stack.iso_url}/lab/regenerate/images/boot-{vm}.iso", timeout=10
        )
        reply.raise_for_status()
        return reply.json()["sha256"]

    def power_off_and_eject(self, rf: Redfish, vm: str) -> None:
        """Back to back, as Ironic sends them: nothing waits for the eject to finish."""
        assert rf.reset(vm, "ForceOff").status_code in (202, 204)
        assert rf.eject(vm).status_code in (202, 204)
        assert _wait(lambda: rf.system(vm)["PowerState"] == "Off", 60), "never off"

    def wait_boot(self, rf: Redfish, c: Cycle) -> dict | None:
        """The cycle's first boot; marks the cycle stuck if it shows PoweringOn past the bound
        (plus a margin for the check's own polling)."""
        powering_on_since = None
        deadline = time.monotonic() + self.boot_timeout
        while time.monotonic() < deadline:
            try:
                record = next((b for b in boots(self.stack, c.start) if b["vm"] == c.vm), None)
                if record:
                    return record
                state = rf.system(c.vm)["PowerState"]
            except requests.RequestException:
                state = ""
            if state == "PoweringOn":
                powering_on_since = powering_on_since or time.monotonic()
                if time.monotonic() - powering_on_since > self.stuck_after:
                    c.stuck = True
            else:
                powering_on_since = None
            time.sleep(0.5)
        return None

    def media_cycle(self, rf: Redfish, c: Cycle) -> None:
        self.power_off_and_eject(rf, c.vm)
        if c.pause:
            time.sleep(c.pause)  # the random pause between eject and insert is the point
        c.sha256 = self.regenerate(c.vm)
        insert = rf.insert(c.vm, c.image)
        assert insert.status_code in (202, 204), f"insert {insert.status_code}"
        rf.boot_cd_once(c.vm)
        reset = rf.reset(c.vm, "On")
        assert reset.status_code in (202, 204), f"reset {reset.status_code}"
        self.finish(rf, c, (insert, reset))

    def disk_cycle(self, rf: Redfish, c: Cycle) -> None:
        assert rf.eject(c.vm).status_code in (202, 204)
        rf.boot_hdd_continuous(c.vm)
        self.power_off_and_eject(rf, c.vm)
        reset = rf.reset(c.vm, "On")
        assert reset.status_code in (202, 204), f"reset {reset.status_code}"
        self.finish(rf, c, (reset,))

    def finish(self, rf: Redfish, c: Cycle, replies) -> None:
        if self.wait_boot(rf, c) is None:
            c.error = "no boot"
            return
        c.booted = True
        for reply in replies:
            if reply.status_code == 202:
                state = _wait(lambda r=reply: rf.task(r)["TaskState"] in FINAL, 60)
                assert state, f"task {reply.headers['Location']} never ended"

    # -- faults and sampling ------------------------------------------------------------------

    def killer(self) -> None:
        rng = random.Random(7)
        workers = [n for n in self.stack.procs if n.startswith("worker")]
        while self.report.kills < self.max_kills and not self.stop.is_set():
            if self.stop.wait(self.kill_every * (0.5 + rng.random())):
                return
            if time.monotonic() > self.deadline - 30:
                return  # let the last cycles finish without a fault
            victim = rng.choice(workers)
            self.stack.kill(victim, signal.SIGKILL)
            self.stack.restart(victim)
            self.report.kills += 1

    def sampler(self, every: float, live: bool = False) -> None:
        start = time.monotonic()
        while not self.stop.is_set():
            memory: dict = {"t": round(time.monotonic() - start), "rss": {}, "pss": {}}
            trees = [(name, proc.pid, True) for name, proc in list(self.stack.procs.items())]
            if self.stack.redis and self.stack.redis.proc:
                # Alone: a save's fork would otherwise count as Redis growing.
                trees.append(("redis", self.stack.redis.proc.pid, False))
            for name, pid, children in trees:
                for label, (rss, pss) in process_memory(name, pid, children).items():
                    memory["rss"][label] = round(rss / 2**20, 1)
                    memory["pss"][label] = round(pss / 2**20, 1)
            memory.update(self._redis_memory())
            self.report.memory.append(memory)
            if live:
                print(format_memory_sample(memory), flush=True)
            if self.stop.wait(every):
                return

    def _redis_memory(self) -> dict:
        """What Redis holds: used memory (its own accounting) and the number of keys."""
        store = Store.from_url(self.stack.redis_url)
        try:
            used = store.r.info("memory")["used_memory"]
            return {"redis_used_mib": round(used / 2**20, 2), "redis_keys": store.r.dbsize()}
        except Exception as exc:  # a sample is worth less than the soak: note it and go on
            return {"redis_error": f"{type(exc).__name__}: {exc}"}
        finally:
            store.r.close()

    # -- run and judge -----------------------------------------------------------------------

    def run(self, sample_every: float, live: bool = False) -> SoakReport:
        nodes = [threading.Thread(target=self.node_loop, args=(vm,)) for vm in self.vms]
        helpers = [
            threading.Thread(target=self.killer, daemon=True),
            threading.Thread(target=self.sampler, args=(sample_every, live), daemon=True),
        ]
        for t in nodes + helpers:
            t.start()
        for t in nodes:
            t.join(self.deadline - time.monotonic() + self.boot_timeout + 300)
        self.stop.set()
        for t in helpers:
            t.join(30)
        return self.judge()

    def judge(self) -> SoakReport:
        rep = self.report
        records = boots(self.stack, min((c.start for c in self.cycles), default=0))
        rep.boots = len(records)
        rep.cycles = len(self.cycles)
        for c in self.cycles:
            mine = [b for b in records if b["vm"] == c.vm and c.start <= b["time"] <= c.end]
            what = f"{c.vm} {c.image or 'disk'} {c.start:.2f}-{c.end:.2f} pause {c.pause:.1f}"
            rep.stuck += c.stuck
            if not c.booted or c.error:
                rep.lost += 1
                rep.errors.append(f"{what}: {c.error or 'no boot'}")
                continue
            expected = ("cdrom", c.image) if c.image else ("disk", None)
            wrong = [b for b in mine if (b["kind"], b["image_url"]) != expected]
            if len(mine) != 1 or wrong:
                rep.duplicated += 1
                rep.errors.append(f"{what}: boots {mine}")
                continue
            if c.image and mine[0].get("sha256") != c.sha256:
                rep.stale += 1
                rep.errors.append(f"{what}: stale bytes {mine[0].get('sha256')} != {c.sha256}")
                continue
            rep.cycles_ok += 1
        # A boot outside every cycle would be a power-on nobody asked for.
        inside = sum(
            1
            for b in records
            if any(c.vm == b["vm"] and c.start <= b["time"] <= c.end for c in self.cycles)
        )
        if inside != len(records):
            rep.duplicated += len(records) - inside
            rep.errors.append(f"{len(records) - inside} boots outside any cycle")
        # Deletion goes through finalizers: what is still there after a minute is left behind.
        if not _wait(lambda: not self.orphans(), 60):
            orphans = self.orphans()
            rep.orphans = len(orphans)
            rep.errors.append(f"orphans: {orphans}")
        return rep

    def orphans(self) -> list[str]:
        """DataVolumes no VM's current media uses, and PVCs of fleetfish without their
        DataVolume, that are not already being deleted."""
        store = Store.from_url(self.stack.redis_url)
        try:
            current = {store.get_media(sid).get("dv") for sid in self._system_ids()}
        finally:
            store.r.close()
        live = [d for d in datavolumes(self.stack) if not d["metadata"].get("deletionTimestamp")]
        names = {d["metadata"]["name"] for d in datavolumes(self.stack)}
        found = [
            f"dv/{d['metadata']['name']}" for d in live if d["metadata"]["name"] not in current
        ]
        for pvc in persistentvolumeclaims(self.stack):
            name = pvc["metadata"]["name"]
            if (
                name.startswith("ff-")
                and name not in names
                and not pvc["metadata"].get("deletionTimestamp")
            ):
                found.append(f"pvc/{name}")
        return found

    def _system_ids(self) -> list[str]:
        return [f"{LAB_NAMESPACE}.{vm}" for vm in self.vms]


# The import timeout the soak sets below a shorter task TTL: its imports take seconds.
MIN_IMPORT_TIMEOUT = 60


def _ttl_env(task_ttl: int) -> dict[str, str]:
    """A shorter task TTL, so that a run sees Redis reach its steady state: the import timeout
    goes below it, as the services require."""
    if not task_ttl:
        return {}
    return {
        "FLEETFISH_TASK_RESULT_TTL": str(task_ttl),
        "FLEETFISH_IMPORT_TIMEOUT": str(max(MIN_IMPORT_TIMEOUT, task_ttl // 2)),
    }


def task_ttl_arg(text: str) -> int:
    """``--task-ttl``: 0 (the service's default) or more than the import timeout the soak
    sets, which the services would otherwise refuse at start."""
    ttl = int(text)
    if ttl and ttl <= MIN_IMPORT_TIMEOUT:
        raise argparse.ArgumentTypeError(
            f"must be 0 or more than {MIN_IMPORT_TIMEOUT} s (the import timeout the soak sets; "
            "the services refuse a task TTL not above it)"
        )
    return ttl


def run_soak(
    var_dir: Path,
    minutes: float,
    vms: int,
    max_kills: int,
    kill_every: float = 30.0,
    import_seconds: float = 2.0,
    visibility_timeout: int = 8,
    sample_every: float = 30.0,
    power_on_timeout: int = 60,
    live: bool = False,
    task_ttl: int = 0,
) -> SoakReport:
    config = LabConfig.for_tests(
        var_dir,
        vms=vms,
        import_seconds=import_seconds,
        workers=2,
        visibility_timeout=visibility_timeout,
        flower=False,
        iso_size_mib=1,
        extra_env={"FLEETFISH_POWER_ON_TIMEOUT": str(power_on_timeout), **_ttl_env(task_ttl)},
    )
    stack = LabStack(config).start(timeout=120)
    try:
        soak = Soak(stack, minutes, max_kills, kill_every, power_on_timeout)
        return soak.run(sample_every, live)
    finally:
        stack.stop()


def format_memory_sample(sample: dict) -> str:
    """One sample on one line: t, then each process's RSS/PSS in MiB, then Redis."""
    parts = [f"t={sample['t']}s"]
    parts += [f"{n} {sample['rss'][n]}/{sample['pss'].get(n, 0)}" for n in sorted(sample["rss"])]
    if "redis_used_mib" in sample:
        parts.append(f"redis used {sample['redis_used_mib']} MiB, {sample['redis_keys']} keys")
    return "memory (RSS/PSS MiB): " + ", ".join(parts)


def memory_growth(rep: SoakReport, kind: str = "pss") -> dict[str, float]:
    """MiB per process between the second sample (after warm-up) and the last, for processes
    present in both (a restarted worker's children are new processes under the same label)."""
    if len(rep.memory) < 3:
        return {}
    first, last = rep.memory[1][kind], rep.memory[-1][kind]
    return {k: round(last[k] - first[k], 1) for k in last if k in first}


def format_report(rep: SoakReport) -> str:
    lines = [
        f"soak: {rep.minutes:g} min, {rep.vms} VMs, {rep.kills} worker SIGKILLs",
        f"cycles {rep.cycles} (ok {rep.cycles_ok}), boots {rep.boots}, lost {rep.lost}, "
        f"stuck {rep.stuck}, stale {rep.stale}, duplicated {rep.duplicated}, "
        f"orphans {rep.orphans}",
        "RSS MiB over time (t in s):",
    ]
    trees = [(s["t"], tree_rss(s)) for s in rep.memory]
    names = sorted({n for _, totals in trees for n in totals})
    lines.append("  t     " + " ".join(f"{n:>9}" for n in names))
    for t, totals in trees:
        lines.append(f"  {t:<5} " + " ".join(f"{totals.get(n, 0):>9}" for n in names))
    lines.append(f"RSS growth after warm-up (MiB): {rep.rss_growth()}")
    lines.append(f"per-process PSS growth after warm-up (MiB): {memory_growth(rep)}")
    lines.append(f"per-process RSS growth after warm-up (MiB): {memory_growth(rep, 'rss')}")
    redis = [s for s in rep.memory if "redis_used_mib" in s]
    if redis:
        lines.append(
            "Redis used memory (MiB) first/max/last after warm-up: "
            f"{redis[min(1, len(redis) - 1)]['redis_used_mib']}/"
            f"{max(s['redis_used_mib'] for s in redis[1:] or redis)}/{redis[-1]['redis_used_mib']}"
            f", keys last {redis[-1]['redis_keys']}"
        )
    lines += [f"error: {e}" for e in rep.errors[:20]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--vms", type=int, default=20)
    parser.add_argument(
        "--max-kills", type=int, default=-1, help="default: one per minute; 0: no worker kills"
    )
    parser.add_argument("--kill-every", type=float, default=60.0, help="mean seconds")
    parser.add_argument("--import-seconds", type=float, default=2.0)
    parser.add_argument("--visibility-timeout", type=int, default=8)
    parser.add_argument("--sample-every", type=float, default=60.0)
    parser.add_argument(
        "--live", action="store_true", help="print each memory sample as it is taken"
    )
    parser.add_argument(
        "--task-ttl",
        type=task_ttl_arg,
        default=0,
        help="FLEETFISH_TASK_RESULT_TTL for the run (default: the service's, 7200 s)",
    )
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument(
        "--var-dir",
        type=Path,
        help="keep the lab's state and logs (logs/worker0.log, ...) here to read afterwards",
    )
    args = parser.parse_args(argv)

    def soak(var_dir: Path) -> SoakReport:
        return run_soak(
            var_dir,
            args.minutes,
            args.vms,
            args.max_kills if args.max_kills >= 0 else max(1, int(args.minutes)),
            args.kill_every,
            args.import_seconds,
            args.visibility_timeout,
            args.sample_every,
            live=args.live,
            task_ttl=args.task_ttl,
        )

    if args.var_dir:
        rep = soak(args.var_dir)
        print(f"lab logs: {args.var_dir / 'logs'}")
    else:
        with tempfile.TemporaryDirectory(prefix="ff-soak-") as tmp:
            rep = soak(Path(tmp))
    print(format_report(rep))
    if args.json:
        args.json.write_text(json.dumps(asdict(rep), indent=2))
    return 0 if rep.clean() and rep.cycles_ok > 0 else 1


if __name__ == "__main__":
    stop_on_sigterm()
    sys.exit(main())
