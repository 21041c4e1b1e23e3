"""A lab HTTP server for ISO images: deterministic content per (path, version), 404 under /missing/."""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import logging
import random
import signal
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

BLOCK = 64 * 1024
MiB = 1024 * 1024


REGENERATE = "/lab/regenerate/"
IMAGES = "/lab/images/"


@functools.lru_cache(maxsize=256)
def _seed_block(path: str, version: int = 0) -> bytes:
    # version 0 keeps the bytes every earlier lab run served for that path
    seed = path if version == 0 else f"{path}#v{version}"
    return random.Random(hashlib.sha256(seed.encode()).digest()).randbytes(BLOCK)


def block(path: str, index: int, version: int = 0) -> bytes:
    """Block ``index`` of the image at ``path``: the path's seed block stamped with the index."""
    data = bytearray(_seed_block(path, version))
    data[:8] = index.to_bytes(8, "big")
    if index == 0:
        data[0x8001:0x8006] = b"CD001"  # the ISO 9660 volume descriptor magic
    return bytes(data)


def iter_content(path: str, size: int, version: int = 0):
    full, rest = divmod(size, BLOCK)
    for i in range(full):
        yield block(path, i, version)
    if rest:
        yield block(path, full, version)[:rest]


def content_sha256(path: str, size: int, version: int = 0) -> str:
    """The sha256 hex digest of the content for ``path`` at ``version`` (for checksums)."""
    digest = hashlib.sha256()
    for chunk in iter_content(path, size, version):
        digest.update(chunk)
    return digest.hexdigest()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "lab-isoserver"
    sys_version = ""
    server: IsoHTTPServer

    def log_message(self, format, *args):  # noqa: A002 - BaseHTTPRequestHandler's signature
        log.debug("%s " + format, self.address_string(), *args)

    def _send_json(self, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _image_info(self, path: str) -> dict:
        version = self.server.version(path)
        return {
            "path": path,
            "version": version,
            "sha256": content_sha256(path, self.server.size, version),
        }

    def _answer(self, send_body: bool) -> None:
        path = urlsplit(self.path).path
        if path.startswith(IMAGES) and self.command == "GET":
            self._send_json(200, self._image_info("/" + path[len(IMAGES) :]))
            return
        self.server.count(self.command, path)
        if path.startswith("/missing/") or not path.endswith(".iso"):
            body = b"404 page not found\n"
            self.send_response(404)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if send_body:
                self.wfile.write(body)
            return
        size = self.server.size
        version = self.server.version(path)  # a download in progress keeps the bytes it began with
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.send_header("Accept-Ranges", "none")
        self.end_headers()
        if not send_body:
            return
        try:
            for chunk in iter_content(path, size, version):
                self.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_GET(self):
        self._answer(True)

    def do_HEAD(self):
        self._answer(False)

    def do_POST(self):
        path = urlsplit(self.path).path
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if not path.startswith(REGENERATE) or len(path) == len(REGENERATE):
            self._send_json(404, {"error": f"no endpoint POST {path}"})
            return
        image = "/" + path[len(REGENERATE) :]
        self.server.regenerate(image)
        self._send_json(200, self._image_info(image))


class IsoHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512

    def __init__(self, address, size: int):
        self.size = size
        self.hits: dict[tuple[str, str], int] = {}
        self.versions: dict[str, int] = {}  # path -> how often its content was regenerated
        self._lock = threading.Lock()
        super().__init__(address, _Handler)

    def version(self, path: str) -> int:
        with self._lock:
            return self.versions.get(path, 0)

    def regenerate(self, path: str) -> int:
        with self._lock:
            self.versions[path] = self.versions.get(path, 0) + 1
            return self.versions[path]

    def count(self, method: str, path: str) -> None:
        with self._lock:
            self.hits[(method, path)] = self.hits.get((method, path), 0) + 1


class IsoServer:
    """``IsoServer(size_mib=4).start()`` serves on ``.url``; ``.image_url(name)`` builds a URL."""

    def __init__(
        self,
        port: int = 0,
        bind: str = "127.0.0.1",
        size_mib: float = 4,
        tls: tuple[str, str] | None = None,
    ):
        self.bind = bind
        self.port = port
        self.tls = tls  # (cert file, key file): serve HTTPS
        self.size = int(size_mib * MiB)
        self._server: IsoHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.bind}:{self.port}"

    def image_url(self, name: str) -> str:
        return f"{self.url}/{name.lstrip('/')}"

    def sha256(self, path: str, version: int | None = None) -> str:
        """The digest of the bytes served for ``path`` now (or at ``version``)."""
        path = "/" + path.lstrip("/")
        if version is None:
            version = self.version(path)
        return content_sha256(path, self.size, version)

    def version(self, path: str) -> int:
        return self._server.version("/" + path.lstrip("/")) if self._server else 0

    def regenerate(self, path: str) -> str:
        """Serve different bytes at the same URL from now on; returns their sha256."""
        path = "/" + path.lstrip("/")
        version = self._server.regenerate(path)
        return content_sha256(path, self.size, version)

    def hits(self, path: str, method: str = "GET") -> int:
        return self._server.hits.get((method, "/" + path.lstrip("/")), 0) if self._server else 0

    def start(self) -> IsoServer:
        self._server = IsoHTTPServer((self.bind, self.port), self.size)
        self.port = self._server.server_address[1]
        if self.tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self.tls)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="isoserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> IsoServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.isoserver", description=__doc__)
    p.add_argument("--bind", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--size-mib", type=float, default=4)
    p.add_argument("--tls-cert", help="serve HTTPS with this certificate (and --tls-key)")
    p.add_argument("--tls-key")
    args = p.parse_args(argv)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    tls = (args.tls_cert, args.tls_key) if args.tls_cert else None
    server = IsoServer(args.port, args.bind, args.size_mib, tls=tls).start()
    print(f"isoserver ready: {server.url}", flush=True)
    while not done.wait(1.0):
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
