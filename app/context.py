"""Per-request access to the app's Store, Celery client and settings, and scope-checked lookups."""

from __future__ import annotations

from celery import Celery
from flask import current_app, g

from app.errors import RedfishError
from fleetfish.settings import Settings
from fleetfish.store import Store


def store() -> Store:
    return current_app.extensions["fleetfish.store"]


def celery() -> Celery:
    return current_app.extensions["fleetfish.celery"]


def settings() -> Settings:
    return current_app.extensions["fleetfish.settings"]


def not_found(kind: str, name: str) -> RedfishError:
    return RedfishError(404, "ResourceNotFound", [kind, name])


def visible_system(system_id: str) -> dict:
    """The mirror document of a system the current user may see; 404 otherwise (never 403)."""
    user = g.user
    if user is not None and not user.scope.allows_id(system_id):
        raise not_found("ComputerSystem", system_id)
    doc = store().get_system(system_id)
    if doc is None or (user is not None and not user.scope.allows(doc)):
        raise not_found("ComputerSystem", system_id)
    return doc


def visible_systems() -> list[dict]:
    """Every mirrored system in the user's scope, in id order (two Redis round trips)."""
    user = g.user
    ids = [i for i in store().system_ids() if user is None or user.scope.allows_id(i)]
    docs = store().get_systems(ids)
    return [d for d in docs if user is None or user.scope.allows(d)]
