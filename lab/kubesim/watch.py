"""Watch streams: newline-delimited JSON events over a chunked HTTP/1.1 response."""

from __future__ import annotations

import json
import select
import socket
import time

from lab.kubesim import errors
from lab.kubesim.kinds import Kind
from lab.kubesim.selectors import field_matcher, label_matcher
from lab.kubesim.store import Expired, ObjectStore

DEFAULT_TIMEOUT = 1800.0  # the apiserver's --min-request-timeout
BOOKMARK_INTERVAL = 5.0  # real apiservers send one about every minute; the lab is impatient
IDLE_CHECK = 1.0  # how often an idle watch checks that its client is still there


class WatchStream:
    """One watch request. ``handler`` is the BaseHTTPRequestHandler that owns the socket."""

    def __init__(self, handler, store: ObjectStore, kind: Kind, namespace: str | None, query: dict):
        self.handler = handler
        self.store = store
        self.kind = kind
        self.namespace = namespace
        self.labels = label_matcher(query.get("labelSelector"))
        self.fields = field_matcher(query.get("fieldSelector"))
        self.bookmarks = query.get("allowWatchBookmarks") in ("true", "1", "True")
        timeout = query.get("timeoutSeconds")
        try:
            self.timeout = float(timeout) if timeout else DEFAULT_TIMEOUT
            rv = query.get("resourceVersion") or ""
            self.rv = int(rv) if rv not in ("", "0") else None
        except ValueError:
            raise errors.bad_request(f"invalid watch parameters: {query}") from None

    def _visible(self, obj: dict) -> bool:
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return self.labels(meta.get("labels") or {}) and self.fields(obj)

    def _client_gone(self) -> bool:
        sock = self.handler.connection
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def serve(self) -> str:
        """Stream until timeout, drop, shutdown or client exit. Returns why it ended."""
        with self.store.cond:
            self.store.open_watches += 1
        try:
            return self._serve()
        finally:
            with self.store.cond:
                self.store.open_watches -= 1
                self.store.cond.notify_all()

    def _serve(self) -> str:
        epoch = self.store.drop_epoch
        h = self.handler
        h.start_chunked()
        if self.rv is None:
            # no resourceVersion: synthetic ADDED for the current state, then changes
            items, last = self.store.list(self.kind, self.namespace)
            lines = [{"type": "ADDED", "object": o} for o in items if self._visible(o)]
        else:
            last, lines = self.rv, []
        deadline = time.monotonic() + self.timeout
        next_bookmark = time.monotonic() + BOOKMARK_INTERVAL
        while True:
            if lines and not h.write_lines(lines):
                return "client gone"
            lines = []
            now = time.monotonic()
            if now >= deadline:
                h.end_chunked()
                return "timeout"
            if self.bookmarks and now >= next_bookmark:
                next_bookmark = now + BOOKMARK_INTERVAL
                lines.append(self._bookmark(last))
                continue
            events = []
            with self.store.cond:
                ending = self.store.stopping or self.store.drop_epoch != epoch
                expired = False
                if not ending:
                    try:
                        events = self.store.events_after(last)
                    except Expired:
                        expired = True
                    if not events and not expired:
                        wait = min(deadline, next_bookmark if self.bookmarks else deadline) - now
                        self.store.cond.wait(timeout=max(0.0, min(wait, IDLE_CHECK)))
            if expired:
                lines.append(_expired_event(last, self.store.floor))
                deadline = 0  # end right after the ERROR event, as the apiserver does
                continue
            if ending:
                if self.store.stopping:
                    h.end_chunked()  # a clean end: clients see a finished watch, not a broken one
                    h.close_connection = True
                    return "shutdown"
                return h.drop_watch()
            if not events:
                if self._client_gone():
                    return "client gone"
                continue
            last = events[-1].rv
            lines = [
                {"type": e.type, "object": e.obj}
                for e in events
                if e.plural == self.kind.plural and self._visible(e.obj)
            ]

    def _bookmark(self, rv: int) -> dict:
        return {
            "type": "BOOKMARK",
            "object": {
                "kind": self.kind.kind,
                "apiVersion": self.kind.api_version,
                "metadata": {"resourceVersion": str(rv)},
            },
        }


def _expired_event(requested: int, oldest: int) -> dict:
    status = errors.expired(f"too old resource version: {requested} ({oldest + 1})").body
    return {"type": "ERROR", "object": status}


def encode(lines: list[dict]) -> bytes:
    return b"".join(json.dumps(line, separators=(",", ":")).encode() + b"\n" for line in lines)
