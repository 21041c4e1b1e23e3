"""Per-request access to the app's Store, Celery client and settings, and scope-checked lookups."""

from __future__ import annotations

from celery import Celery
from flask import current_app, g

from app.errors import RedfishError
from fleetfish.eventlog import EventLog
from fleetfish.settings import Settings
from fleetfish.store import Store


def store() -> Store:
    return current_app.extensions["fleetfish.store"]


def events() -> EventLog:
    return current_app.extensions["fleetfish.events"]


def celery() -> Celery:
    return current_app.extensions["fleetfish.celery"]


def settings() -> Settings:
    return current_app.extensions["fleetfish.settings"]


def not_found(kind: str, name: str) -> RedfishError:
    return RedfishError(404, "ResourceNotFound", [kind, name])


def visible_system(system_id: str) -> dict:
    """The mirror document of a system the current user may see; 404 otherwise (never 403)."""
    return visible_system_with(system_id)[0]


def visible_system_with(system_id: str, *extra: str) -> tuple[dict, ...]:
    """The visible system's document plus the named hashes ("power", "boot", "media" for Cd).

    One pipelined round trip to Redis whatever is asked for: a GET of a system is the hot path
    (Ironic polls it) and each round trip costs more than rendering the whole resource.
    """
    user = g.user
    if user is not None and not user.scope.allows_id(system_id):
        raise not_found("ComputerSystem", system_id)
    [(doc, *hashes)] = store().systems_with([system_id], *extra)
    if doc is None or (user is not None and not user.scope.allows(doc)):
        raise not_found("ComputerSystem", system_id)
    return (doc, *hashes)


def visible_systems() -> list[dict]:
    """Every mirrored system in the user's scope, in id order (two Redis round trips)."""
    user = g.user
    ids = [i for i in store().system_ids() if user is None or user.scope.allows_id(i)]
    docs = store().get_systems(ids)
    return [d for d in docs if user is None or user.scope.allows(d)]


def visible_systems_with(system_ids: list[str], *extra: str) -> dict[str, tuple[dict, ...]]:
    """``visible_system_with`` for many systems in one pipelined round trip; systems that are
    gone or outside the user's scope are left out."""
    user = g.user
    ids = [i for i in system_ids if user is None or user.scope.allows_id(i)]
    found: dict[str, tuple[dict, ...]] = {}
    for system_id, (doc, *hashes) in zip(ids, store().systems_with(ids, *extra), strict=True):
        if doc is not None and (user is None or user.scope.allows(doc)):
            found[system_id] = (doc, *hashes)
    return found
