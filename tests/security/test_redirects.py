"""The workers' own fetch of an image (HEAD for its size) never follows a redirect elsewhere."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading

import pytest

from fleetfish.image_policy import refusal
from fleetfish.settings import Settings
from lab.ports import free_port
from tasks.media.volumes import DEFAULT_SIZE_MIB, head_content_length, storage_size

ISO_LENGTH = 700 * 2**20


class Counting(http.server.ThreadingHTTPServer):
    """Answers every HEAD with ``reply`` (status, headers) and counts the requests it got."""

    def __init__(self, status: int, headers: dict[str, str]):
        self.hits = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_HEAD(self):  # noqa: N802 - http.server's naming
                server.hits += 1
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", free_port()), Handler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.shutdown()
        self.server_close()
        self.thread.join(timeout=5)

    @property
    def port(self) -> int:
        return self.server_address[1]


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_to_a_refused_host_is_not_followed(status):
    """The ISO server on 127.0.0.1 is listed; it redirects to localhost (refused) where a
    server that would tell a size is listening: the worker never asks it, and sizes the
    DataVolume with the default."""
    settings = Settings(image_allowlist=("127.0.0.1",))
    target_headers = {"Content-Length": str(ISO_LENGTH)}
    with Counting(200, target_headers) as target:
        refused = f"http://localhost:{target.port}/x.iso"
        assert refusal("localhost", settings)
        with Counting(status, {"Location": refused, "Content-Length": "0"}) as allowed:
            url = f"http://127.0.0.1:{allowed.port}/boot.iso"
            assert not refusal("127.0.0.1", settings)
            size = storage_size(head_content_length(url), settings)
            assert allowed.hits == 1
        assert target.hits == 0
    assert size == f"{DEFAULT_SIZE_MIB}Mi"


def test_a_direct_answer_still_sizes_the_volume():
    with Counting(200, {"Content-Length": str(ISO_LENGTH)}) as server:
        size = head_content_length(f"http://127.0.0.1:{server.port}/boot.iso")
    assert size == ISO_LENGTH
    assert storage_size(size, Settings()) == f"{int(700 * 1.3)}Mi"


def test_workers_read_the_policy_without_flask():
    """One policy for both tiers; the workers do not load the web framework for it."""
    code = (
        "import sys, fleetfish.image_policy, tasks.media.volumes; "
        "assert 'flask' not in sys.modules, sorted(m for m in sys.modules if 'flask' in m)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
