"""TCP ports on loopback for lab processes and tests: free ones, taken ones, and who listens."""

from __future__ import annotations

import socket
import time


class PortInUseError(RuntimeError):
    """A port the lab must bind is taken: the message names the port and the setting to change."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def ensure_free(port: int, setting: str, host: str = "127.0.0.1") -> None:
    """Raise PortInUseError unless ``port`` can be bound now (as the servers bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Servers set SO_REUSEADDR, so a socket in TIME_WAIT does not stop them; nor this check.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            raise PortInUseError(
                f"port {port} is already in use ({setting}={port}): stop what listens there "
                f"or set {setting} to a free port"
            ) from None


def wait_for_port(host: str, port: int, timeout: float = 30.0) -> bool:
    """True once something accepts connections on host:port, False after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def listens(pid: int, port: int) -> bool:
    """True if process ``pid`` or one of its descendants listens on TCP ``port``.

    Tells the lab's own server from another process that took the port meanwhile: a
    connection that succeeds proves only that someone listens.
    """
    import psutil  # the [lab] extra; the service image has no need of it

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return False
    for proc in procs:
        try:
            # psutil < 6 names it connections().
            conns = getattr(proc, "net_connections", proc.connections)(kind="tcp")
        except psutil.Error:
            continue
        if any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in conns):
            return True
    return False
