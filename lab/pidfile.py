"""``<var dir>/lab.pids``: one running lab per var dir, and what a killed lab left behind.

The running lab holds an exclusive lock on the file; the kernel drops it when the lab exits,
however it exits, so a lock that cannot be taken means a live lab. The file lists the lab's
processes with their start times: a later start stops those still running (they are orphans
of a lab killed with SIGKILL) and never a process that merely reuses one of their pids.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
from pathlib import Path

import psutil

log = logging.getLogger("fleetfish.lab")

TERM_SECONDS = 10.0


class LabRunningError(RuntimeError):
    """Another lab runs on the same var dir."""


def _identity(pid: int) -> list | None:
    try:
        return [pid, psutil.Process(pid).create_time()]
    except psutil.Error:
        return None


def _still_running(ident: list) -> psutil.Process | None:
    """The process ``ident`` ([pid, start time]) names, if it is the same one and running."""
    try:
        proc = psutil.Process(ident[0])
        if proc.create_time() == ident[1] and proc.status() != psutil.STATUS_ZOMBIE:
            return proc
    except (psutil.Error, IndexError, TypeError):
        pass
    return None


def _signal_group(proc: psutil.Process, sig: int) -> None:
    """The lab starts each child as a session leader: its group holds its own children."""
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except (ProcessLookupError, psutil.Error):
        pass


class LabPidFile:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._fd: int | None = None

    def claim(self) -> None:
        """Lock the file for this lab, after stopping what a dead lab left running."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            owner = self._read().get("lab", ["?"])[0]
            raise LabRunningError(
                f"another lab (pid {owner}) runs with {self.path.parent}: stop it, or set "
                "LAB_VAR_DIR to another directory (and the ports to free ones)"
            ) from None
        self._fd = fd
        self._stop_leftovers(self._read())
        self.write({})

    def _read(self) -> dict:
        try:
            return json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}

    def _stop_leftovers(self, previous: dict) -> None:
        left = {
            name: proc
            for name, ident in previous.get("children", {}).items()
            if (proc := _still_running(ident))
        }
        if not left:
            return
        log.warning(
            "stopping what a previous lab (pid %s) left running: %s",
            previous.get("lab", ["?"])[0],
            ", ".join(f"{name} (pid {proc.pid})" for name, proc in sorted(left.items())),
        )
        for proc in left.values():
            _signal_group(proc, signal.SIGTERM)
        _, alive = psutil.wait_procs(list(left.values()), timeout=TERM_SECONDS)
        for proc in alive:
            _signal_group(proc, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=TERM_SECONDS)

    def write(self, pids: dict[str, int]) -> None:
        """Record this lab and its processes (name -> pid)."""
        if self._fd is None:
            return
        children = {name: ident for name, pid in pids.items() if (ident := _identity(pid))}
        data = json.dumps({"lab": _identity(os.getpid()), "children": children}).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        """Everything is stopped: forget it and let another lab start."""
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)
        os.close(self._fd)
        self._fd = None
