"""A tiny HTTP server that serves any ``*.iso`` path so that each download takes a set time.

It stands in for a slow image server: sushy-tools downloads the image inside InsertMedia, so the
time this server takes is the time its InsertMedia request blocks.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from lab.ports import free_port

CHUNKS = 64


class _Handler(BaseHTTPRequestHandler):
    server: ThrottledIsoServer

    def log_message(self, fmt, *args):  # quiet: hundreds of downloads per run
        return

    def _head(self) -> bool:
        if not self.path.split("?")[0].endswith(".iso"):
            self.send_error(404)
            return False
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(self.server.size_bytes))
        self.end_headers()
        return True

    def do_HEAD(self):  # noqa: N802 - http.server's naming
        self._head()

    def do_GET(self):  # noqa: N802
        if not self._head():
            return
        self.server.count_download()
        size, seconds = self.server.size_bytes, self.server.seconds
        chunk = max(1, size // CHUNKS)
        start = time.monotonic()
        sent = 0
        # Bounded: exactly CHUNKS (+1 remainder) writes, each paced to its share of the time.
        for i in range(CHUNKS + 1):
            piece = min(chunk, size - sent)
            if piece <= 0:
                break
            time.sleep(max(0.0, start + seconds * (i + 1) / (CHUNKS + 1) - time.monotonic()))
            try:
                self.wfile.write(b"\0" * piece)
            except (BrokenPipeError, ConnectionResetError):
                return
            sent += piece


class ThrottledIsoServer(ThreadingHTTPServer):
    """``with ThrottledIsoServer(seconds=30) as iso: iso.url_for("boot-x")``."""

    daemon_threads = True

    def __init__(self, seconds: float, size_bytes: int = 1024 * 1024, port: int = 0):
        self.seconds = float(seconds)
        self.size_bytes = int(size_bytes)
        self.downloads = 0
        self._lock = threading.Lock()
        super().__init__(("127.0.0.1", port or free_port()), _Handler)
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    def count_download(self) -> None:
        with self._lock:
            self.downloads += 1

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def url_for(self, name: str) -> str:
        return f"{self.base_url}/images/{name}.iso"

    def __enter__(self) -> ThrottledIsoServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()
