"""Per-process shared clients of a worker: settings, the Redis Store and the KubeVirt adapter.

Created lazily on first use (after the worker forked or started its threads) and shared by all
pool threads: redis-py's connection pool and the kubernetes ApiClient are both thread-safe.
"""

from __future__ import annotations

import threading

from fleetfish.eventlog import EventLog
from fleetfish.settings import Settings
from fleetfish.store import Store
from workers.kubevirt import KubeVirt

_lock = threading.Lock()
_settings: Settings | None = None
_store: Store | None = None
_kube: KubeVirt | None = None


def settings() -> Settings:
    global _settings
    with _lock:
        if _settings is None:
            _settings = Settings.from_env()
        return _settings


def store() -> Store:
    global _store
    conf = settings()
    with _lock:
        if _store is None:
            _store = Store.from_url(conf.redis_url, task_ttl=conf.task_result_ttl)
        return _store


def events() -> EventLog:
    """The event log over the same Redis client as ``store()``."""
    return EventLog(store().r, settings().event_log_entries)


def kube() -> KubeVirt:
    global _kube
    conf = settings()
    with _lock:
        if _kube is None:
            _kube = KubeVirt.from_settings(conf)
        return _kube


def close() -> None:
    """Drop the clients (worker shutdown); the next use creates new ones."""
    global _store, _kube
    with _lock:
        if _kube is not None:
            _kube.close()
        if _store is not None:
            _store.close()
        _store = _kube = None
