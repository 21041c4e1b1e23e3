"""In-memory object store: a global resourceVersion, a bounded event history, watch wake-ups."""

from __future__ import annotations

import bisect
import copy
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from lab.kubesim import errors
from lab.kubesim.kinds import ALL, Kind


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Event:
    rv: int
    plural: str
    type: str  # ADDED, MODIFIED, DELETED
    obj: dict  # a snapshot; never mutated after it is recorded


class Expired(Exception):
    """The requested resourceVersion is older than the event history."""


class ObjectStore:
    """Every object of every kind, behind one condition variable that watches wait on."""

    def __init__(self, history: int = 20000):
        self.cond = threading.Condition()
        self._rv = 0
        self._objects: dict[str, dict[tuple[str, str], dict]] = {k.plural: {} for k in ALL}
        self._events: list[Event] = []
        self._history = history
        # every event with rv > _floor is in _events; older resourceVersions answer 410
        self._floor = 0
        self.drop_epoch = 0  # bumped by /lab/watches/drop: open watches end
        self.stopping = False
        self.open_watches = 0

    # -- reads -----------------------------------------------------------------------------

    @property
    def rv(self) -> int:
        with self.cond:
            return self._rv

    @property
    def floor(self) -> int:
        """The oldest resourceVersion a watch can still start from."""
        with self.cond:
            return self._floor

    def get(self, kind: Kind, namespace: str, name: str) -> dict | None:
        with self.cond:
            obj = self._objects[kind.plural].get((namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, kind: Kind, namespace: str | None = None) -> tuple[list[dict], int]:
        """Objects sorted by (namespace, name), deep-copied, with the store's current rv."""
        with self.cond:
            items = [
                copy.deepcopy(obj)
                for (ns, _), obj in sorted(self._objects[kind.plural].items())
                if namespace is None or ns == namespace
            ]
            return items, self._rv

    def peek(self, kind: Kind, namespace: str, name: str) -> dict | None:
        """The live object, no copy: only for read-only use while holding ``cond``."""
        return self._objects[kind.plural].get((namespace, name))

    def peek_all(self, kind: Kind) -> list[dict]:
        return list(self._objects[kind.plural].values())

    # -- writes ----------------------------------------------------------------------------

    def _record(self, kind: Kind, type_: str, obj: dict) -> None:
        self._events.append(Event(self._rv, kind.plural, type_, copy.deepcopy(obj)))
        if len(self._events) > self._history * 2:
            # trim in batches so appends stay cheap
            cut = len(self._events) - self._history
            self._floor = self._events[cut - 1].rv
            self._events = self._events[cut:]
        self.cond.notify_all()

    def _bump(self, obj: dict) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)

    def create(self, kind: Kind, obj: dict) -> dict:
        meta = obj.setdefault("metadata", {})
        with self.cond:
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            key = (meta.get("namespace", ""), meta["name"])
            existing = self._objects[kind.plural].get(key)
            if existing is not None:
                going = "deletionTimestamp" in existing["metadata"]
                raise errors.already_exists(kind, meta["name"], being_deleted=going)
            obj["apiVersion"] = kind.api_version
            obj["kind"] = kind.kind
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_iso()
            meta["generation"] = 1
            meta.pop("deletionTimestamp", None)
            self._bump(obj)
            self._objects[kind.plural][key] = obj
            self._record(kind, "ADDED", obj)
            return copy.deepcopy(obj)

    def replace(self, kind: Kind, obj: dict, expect_rv: str | None) -> dict:
        """Store ``obj`` in place of the current object (which must exist), optimistic on rv."""
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        with self.cond:
            current = self._objects[kind.plural].get(key)
            if current is None:
                raise errors.not_found(kind, meta["name"])
            if expect_rv and expect_rv != current["metadata"]["resourceVersion"]:
                raise errors.conflict(kind, meta["name"])
            self._commit(kind, key, current, obj)
            return copy.deepcopy(obj)

    def _commit(self, kind: Kind, key: tuple[str, str], current: dict, obj: dict) -> bool:
        """Write obj over current, keeping immutable metadata; False (no event) if nothing changed."""
        meta = obj["metadata"]
        for field in ("uid", "creationTimestamp", "generation", "resourceVersion"):
            meta[field] = current["metadata"].get(field)
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            if field in current["metadata"]:  # once set, a client cannot take it back
                meta[field] = current["metadata"][field]
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        if obj == current:
            return False
        if "deletionTimestamp" in meta and not meta.get("finalizers"):
            # the last finalizer went: the API server removes the object
            del self._objects[kind.plural][key]
            self._bump(obj)
            self._record(kind, "DELETED", obj)
            return True
        if obj.get("spec") != current.get("spec"):
            meta["generation"] = int(current["metadata"].get("generation") or 1) + 1
        self._bump(obj)
        self._objects[kind.plural][key] = obj
        self._record(kind, "MODIFIED", obj)
        return True

    def mutate(
        self, kind: Kind, namespace: str, name: str, fn: Callable[[dict], object]
    ) -> dict | None:
        """Read-modify-write under the lock (controllers use it); None when the object is gone.

        ``fn`` edits a copy in place; nothing is written when the copy did not change.
        """
        key = (namespace, name)
        with self.cond:
            current = self._objects[kind.plural].get(key)
            if current is None:
                return None
            obj = copy.deepcopy(current)
            fn(obj)
            self._commit(kind, key, current, obj)
            return copy.deepcopy(self._objects[kind.plural].get(key, obj))

    def request_delete(self, kind: Kind, namespace: str, name: str) -> tuple[dict, bool]:
        """DELETE as the API server does it: (object, gone).

        Without finalizers the object goes at once. With finalizers it only gets a
        deletionTimestamp (a MODIFIED event) and goes when its controllers remove the last one;
        asking again changes nothing.
        """
        key = (namespace, name)
        with self.cond:
            current = self._objects[kind.plural].get(key)
            if current is None:
                raise errors.not_found(kind, name)
            if not current["metadata"].get("finalizers"):
                return self.delete(kind, namespace, name), True
            if "deletionTimestamp" not in current["metadata"]:
                obj = copy.deepcopy(current)
                obj["metadata"]["deletionTimestamp"] = now_iso()
                obj["metadata"]["deletionGracePeriodSeconds"] = 0
                self._commit(kind, key, current, obj)
            return copy.deepcopy(self._objects[kind.plural][key]), False

    def remove_finalizer(self, kind: Kind, namespace: str, name: str, finalizer: str) -> None:
        """A controller's finalizer work is done (the object goes if it was the last one)."""

        def edit(obj):
            left = [f for f in obj["metadata"].get("finalizers") or [] if f != finalizer]
            if left:
                obj["metadata"]["finalizers"] = left
            else:
                obj["metadata"].pop("finalizers", None)

        self.mutate(kind, namespace, name, edit)

    def delete(self, kind: Kind, namespace: str, name: str) -> dict:
        """Remove the object now, finalizers or not (a controller whose cleanup is done)."""
        key = (namespace, name)
        with self.cond:
            current = self._objects[kind.plural].pop(key, None)
            if current is None:
                raise errors.not_found(kind, name)
            self._bump(current)
            self._record(kind, "DELETED", current)
            return copy.deepcopy(current)

    # -- history -----------------------------------------------------------------------------

    def events_after(self, rv: int) -> list[Event]:
        """Events newer than rv; raises Expired when some of them already left the history."""
        with self.cond:
            if rv < self._floor:
                raise Expired()
            start = bisect.bisect_right(self._events, rv, key=lambda e: e.rv)
            return self._events[start:]

    def compact(self) -> int:
        """Forget the history: every resourceVersion before now answers 410."""
        with self.cond:
            self._floor = self._rv
            self._events = []
            self.cond.notify_all()
            return self._floor

    def drop_watches(self) -> None:
        with self.cond:
            self.drop_epoch += 1
            self.cond.notify_all()

    def stop(self, wait: float = 2.0) -> None:
        """End every watch (each writes its last chunk), waiting up to ``wait`` seconds for them."""
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.open_watches == 0, timeout=wait)
