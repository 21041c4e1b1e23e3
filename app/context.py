"""Per-request access to the app's Store, Celery client and settings, and scope-checked lookups."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from celery import Celery
from flask import current_app, g, request

from app.errors import RedfishError
from fleetfish.eventlog import EventLog
from fleetfish.settings import Settings
from fleetfish.store import Store

F = TypeVar("F", bound=Callable)


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


def reads_system(*extra: str) -> Callable[[F], F]:
    """Declares that a view reads its system with these hashes first
    (``visible_system_with(system_id, *extra)``): a call authenticated by a session token reads
    them in the session's round trip (``app.auth``), one round trip less per call."""

    def declare(view: F) -> F:
        view.system_reads = extra  # type: ignore[attr-defined]
        return view

    return declare


def system_reads() -> tuple[str, tuple[str, ...]] | None:
    """The system id and hashes the current request's view declared with ``reads_system``."""
    view = current_app.view_functions.get(request.endpoint or "")
    extra = getattr(view, "system_reads", None)
    system_id = (request.view_args or {}).get("system_id")
    if extra is None or not system_id:
        return None
    return system_id, extra


def prefetch_system(pipe, reads: tuple[str, tuple[str, ...]]) -> Callable[[list], None]:
    """Queue ``reads`` on ``pipe`` (a pipeline of the Store's client: the sessions use the same
    one); their answer is kept for the view's ``visible_system_with``."""
    system_id, extra = reads
    decode = store().queue_systems_with(pipe, [system_id], *extra)

    def keep(replies: list) -> None:
        g.prefetched = (reads, decode(replies)[0])

    return keep


def visible_system_with(system_id: str, *extra: str) -> tuple[dict, ...]:
    """The visible system's document plus the named hashes ("power", "boot", "media" for Cd).

    One pipelined round trip to Redis whatever is asked for (none when the request's session
    check already read them, see ``reads_system``): a GET of a system is the hot path (Ironic
    polls it) and each round trip costs more than rendering the whole resource.
    """
    user = g.user
    if user is not None and not user.scope.allows_id(system_id):
        raise not_found("ComputerSystem", system_id)
    prefetched = g.pop("prefetched", None)
    if prefetched is not None and prefetched[0] == (system_id, extra):
        doc, *hashes = prefetched[1]
    else:
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
