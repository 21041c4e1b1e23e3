"""Fault injection and the request log that tests use to see what a client called."""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from dataclasses import dataclass

from lab.kubesim import errors


@dataclass
class Fault:
    method: str
    path_regex: re.Pattern
    status: int | None
    count: int
    delay_seconds: float
    message: str

    def describe(self) -> dict:
        return {
            "method": self.method,
            "path_regex": self.path_regex.pattern,
            "status": self.status,
            "count": self.count,
            "delay_seconds": self.delay_seconds,
            "message": self.message,
        }


class Faults:
    """The next ``count`` requests matching method and path regex get ``status`` (after the delay)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, spec: dict) -> dict:
        try:
            status = spec.get("status")
            fault = Fault(
                method=str(spec.get("method") or "*").upper(),
                path_regex=re.compile(spec.get("path_regex") or ".*"),
                status=int(status) if status else None,
                count=int(spec.get("count", 1)),
                delay_seconds=float(spec.get("delay_seconds") or 0),
                message=str(spec.get("message") or "fault injected by the lab simulator"),
            )
        except (TypeError, ValueError, re.error) as exc:
            raise errors.bad_request(f"invalid fault: {exc}") from None
        with self._lock:
            self._faults.append(fault)
        return fault.describe()

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def list(self) -> list[dict]:
        with self._lock:
            return [f.describe() for f in self._faults]

    def apply(self, method: str, path: str) -> None:
        """Sleep and/or raise for the first live fault matching this request."""
        with self._lock:
            fault = next(
                (
                    f
                    for f in self._faults
                    if f.count > 0 and f.method in ("*", method) and f.path_regex.search(path)
                ),
                None,
            )
            if fault is None:
                return
            fault.count -= 1
            if fault.count <= 0:
                self._faults.remove(fault)
        if fault.delay_seconds:
            time.sleep(min(fault.delay_seconds, 300.0))
        if fault.status:
            raise errors.ApiError(fault.status, fault.message)


class RequestLog:
    def __init__(self, limit: int = 20000):
        self._lock = threading.Lock()
        self._entries: deque[dict] = deque(maxlen=limit)

    def add(self, method: str, path: str, status: int) -> None:
        with self._lock:
            self._entries.append(
                {"time": time.time(), "method": method, "path": path, "status": status}
            )

    def since(self, since: float | None) -> list[dict]:
        with self._lock:
            return [dict(e) for e in self._entries if since is None or e["time"] >= since]


class RequestCounts:
    """Kubernetes API requests per (user agent, verb, resource), as an audit log would count
    them: ``get``/``list``/``watch``/``create``/``update``/``patch``/``delete`` on a resource
    plural (``virtualmachines/start`` for a subresource). /lab paths are not counted."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str, str], int] = {}

    def add(self, agent: str, verb: str, resource: str) -> None:
        key = (agent, verb, resource)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    def rows(self) -> list[dict]:
        with self._lock:
            items = sorted(self._counts.items())
        return [
            {"agent": agent, "verb": verb, "resource": resource, "count": count}
            for (agent, verb, resource), count in items
        ]
