"""The HTTP layer: a threaded HTTP/1.1 server routing Kubernetes, virt-api and /lab paths."""

from __future__ import annotations

import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit

from lab.kubesim import discovery, errors, watch
from lab.kubesim.kinds import BY_PATH, NAMESPACE, SUBRESOURCES

if TYPE_CHECKING:
    from lab.kubesim.simulator import Simulator

log = logging.getLogger(__name__)

NOT_FOUND = errors.ApiError(404, "the server could not find the requested resource", "NotFound")
MAX_BODY = 16 * 1024 * 1024


class LabHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512

    def __init__(self, address, sim: Simulator):
        self.sim = sim
        self.connections: set[socket.socket] = set()
        self.conn_lock = threading.Lock()
        self.abrupt_drop = False
        super().__init__(address, Handler)

    def close_connections(self) -> None:
        with self.conn_lock:
            conns = list(self.connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kubesim"
    sys_version = ""
    server: LabHTTPServer

    # -- connection bookkeeping --------------------------------------------------------------

    def setup(self):
        super().setup()
        with self.server.conn_lock:
            self.server.connections.add(self.connection)

    def finish(self):
        with self.server.conn_lock:
            self.server.connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format, *args):  # noqa: A002 - BaseHTTPRequestHandler's signature
        log.debug("%s " + format, self.address_string(), *args)

    # -- writing -------------------------------------------------------------------------------

    def send_json(self, code: int, body: dict | None) -> None:
        data = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        self._status = code
        if not getattr(self, "_logged", True):
            # logged before the answer leaves: a client's next call must find this one in the log
            self.server.sim.requests.add(self.command, self.path, code)
            self._logged = True
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self._status = code

    def start_chunked(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self._status = 200
        self.server.sim.requests.add(self.command, self.path, 200)
        self._logged = True

    def write_lines(self, lines: list[dict]) -> bool:
        data = watch.encode(lines)
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            return True
        except OSError:
            self.close_connection = True
            return False

    def end_chunked(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True

    def drop_watch(self) -> str:
        """/lab/watches/drop: end the stream and close the connection (abruptly if asked)."""
        if not self.server.abrupt_drop:
            self.end_chunked()
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        return "dropped"

    # -- reading -------------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            for _ in range(100000):
                size = int(self.rfile.readline().strip().split(b";")[0] or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                out += self.rfile.read(size)
                self.rfile.readline()
                if len(out) > MAX_BODY:
                    raise errors.ApiError(413, "request entity too large", "RequestEntityTooLarge")
            return out
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise errors.ApiError(413, "request entity too large", "RequestEntityTooLarge")
        return self.rfile.read(length) if length else b""

    # -- dispatch ------------------------------------------------------------------------------

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        self._status = 500
        self._logged = False
        parts = urlsplit(self.path)
        path = parts.path.rstrip("/") or "/"
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        sim = self.server.sim
        try:
            raw = self._read_body()
            if not path.startswith("/lab/"):
                verb, resource = classify(method, path, query)
                sim.counts.add(self.headers.get("User-Agent", ""), verb, resource)
                sim.faults.apply(method, path)
            code, body = self._route(method, path, query, raw)
            if code is not None:
                self.send_json(code, body)
        except errors.ApiError as exc:
            self._send_error(exc)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a simulator bug must still answer like an apiserver
            log.exception("%s %s failed", method, self.path)
            self._send_error(errors.internal(str(exc)))
        finally:
            if not self._logged:
                sim.requests.add(method, self.path, self._status)

    def _send_error(self, exc: errors.ApiError) -> None:
        try:
            self.send_json(exc.code, exc.body)
        except OSError:
            self.close_connection = True

    def _json(self, raw: bytes):
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise errors.bad_request(
                f"the body of the request was in an unknown format: {exc}"
            ) from None

    def _route(
        self, method: str, path: str, query: dict, raw: bytes
    ) -> tuple[int | None, dict | None]:
        sim = self.server.sim
        if path.startswith("/lab/"):
            return sim.lab_route(
                method, path, query, self._json(raw) if method in ("POST", "PUT") else {}, self
            )
        if method in ("GET", "HEAD"):
            found = self._discovery(path)
            if found is not None:
                return 200, found
        segs = [s for s in path.split("/") if s]
        if len(segs) >= 3 and segs[0] == "apis" and segs[1] == discovery.SUBRESOURCE_GROUP:
            return self._subresource(method, segs, raw)
        target = _resolve(segs)
        if target is None:
            raise NOT_FOUND
        kind, ns, name, sub = target
        api = sim.api
        if sub not in (None, "status") or (sub == "status" and not kind.has_status):
            raise NOT_FOUND
        status = sub == "status"
        if name is None:
            if method == "GET":
                if query.get("watch") in ("true", "1", "True"):
                    stream = watch.WatchStream(self, sim.store, kind, ns, query)
                    stream.serve()
                    return None, None
                return 200, api.list(kind, ns, query)
            if method == "POST" and (ns is not None or not kind.namespaced):
                return 201, api.create(kind, ns, self._json(raw))
            raise _not_allowed()
        if method in ("GET", "HEAD"):
            return 200, api.get(kind, ns or "", name)
        if method == "PUT":
            return 200, api.replace(kind, ns or "", name, self._json(raw), status=status)
        if method == "PATCH":
            return 200, api.patch(
                kind, ns or "", name, raw, self.headers.get("Content-Type", ""), query, status
            )
        if method == "DELETE" and not status:
            return 200, api.delete(kind, ns or "", name)
        raise _not_allowed()

    def _discovery(self, path: str) -> dict | None:
        if path == "/version":
            return discovery.VERSION
        if path in ("/healthz", "/readyz", "/livez"):
            return {"status": "ok"}
        if path == "/api":
            return discovery.api_versions()
        if path == "/apis":
            return discovery.api_group_list()
        segs = [s for s in path.split("/") if s]
        if segs == ["api", "v1"]:
            return discovery.resource_list("", "v1")
        if len(segs) == 3 and segs[0] == "apis":
            found = discovery.resource_list(segs[1], segs[2])
            if found is None:
                raise NOT_FOUND
            return found
        if len(segs) == 2 and segs[0] == "apis":
            for group, version in discovery.groups():
                if group == segs[1]:
                    gv = {"groupVersion": f"{group}/{version}", "version": version}
                    return {
                        "kind": "APIGroup",
                        "apiVersion": "v1",
                        "name": group,
                        "versions": [gv],
                        "preferredVersion": gv,
                    }
        return None

    def _subresource(self, method: str, segs: list[str], raw: bytes) -> tuple[int, dict | None]:
        # /apis/subresources.kubevirt.io/v1/namespaces/{ns}/{plural}/{name}/{action}
        if len(segs) == 4 and segs[3] in ("version", "healthz"):
            return 200, {"gitVersion": "v1.9.0-kubesim"} if segs[3] == "version" else {
                "status": "ok"
            }
        if len(segs) != 8 or segs[2] != "v1" or segs[3] != "namespaces":
            raise NOT_FOUND
        ns, plural, name, action = segs[4], segs[5], segs[6], segs[7]
        if action not in SUBRESOURCES.get(plural, ()):
            raise NOT_FOUND
        if method != "PUT":
            raise _not_allowed()
        code = self.server.sim.subresources.handle(plural, ns, name, action, self._json(raw))
        return code, None


def classify(method: str, path: str, query: dict) -> tuple[str, str]:
    """(verb, resource) of a Kubernetes API request, named as the apiserver's audit log does."""
    segs = [s for s in path.split("/") if s]
    if len(segs) == 8 and segs[:2] == ["apis", discovery.SUBRESOURCE_GROUP]:
        return _VERBS.get(method, method.lower()), f"{segs[5]}/{segs[7]}"
    target = _resolve(segs)
    if target is None:
        return _VERBS.get(method, method.lower()), "discovery"
    kind, _, name, sub = target
    resource = kind.plural + (f"/{sub}" if sub else "")
    if method in ("GET", "HEAD") and name is None:
        return ("watch" if query.get("watch") in ("true", "1", "True") else "list"), resource
    if method == "DELETE" and name is None:
        return "deletecollection", resource
    return _VERBS.get(method, method.lower()), resource


_VERBS = {
    "GET": "get",
    "HEAD": "get",
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}


def _not_allowed() -> errors.ApiError:
    return errors.ApiError(
        405, "the server does not allow this method on the requested resource", "MethodNotAllowed"
    )


def _resolve(segs: list[str]):
    """(kind, namespace or None, name or None, subresource or None) for a resource path."""
    if len(segs) >= 2 and segs[0] == "api" and segs[1] == "v1":
        group, version, rest = "", "v1", segs[2:]
    elif len(segs) >= 3 and segs[0] == "apis":
        group, version, rest = segs[1], segs[2], segs[3:]
    else:
        return None
    if not rest:
        return None
    ns = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        ns, rest = rest[1], rest[2:]
    kind = BY_PATH.get((group, version, rest[0]))
    if kind is None or len(rest) > 3:
        return None
    if ns is not None and not kind.namespaced:
        return None
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if kind.namespaced and ns is None and name is not None:
        return None
    if kind is NAMESPACE:
        ns = None
    return kind, ns, name, sub
