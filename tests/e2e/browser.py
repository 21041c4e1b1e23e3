"""A headless Chromium driven over its DevTools protocol, for tests of the /fleet page.

It answers the page's Basic challenge as a user typing the credentials into the browser's
prompt would (Fetch.authRequired), so the page and its polls go through the browser's own
authentication, not through headers a test injected.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import requests
import websocket

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    """The browser binary: $CHROMIUM, else the first of CANDIDATES on PATH."""
    if os.environ.get("CHROMIUM"):
        return os.environ["CHROMIUM"]
    return next((path for name in CANDIDATES if (path := shutil.which(name))), None)


class Browser:
    def __init__(self, binary: str, profile: Path, credentials: tuple[str, str]):
        self.credentials = credentials
        args = [
            binary,
            "--headless",
            "--disable-gpu",
            "--no-first-run",
            "--remote-debugging-port=0",
            "--remote-allow-origins=*",
            f"--user-data-dir={profile}",
            "--window-size=1400,1000",
            "about:blank",
        ]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to sandbox as root
        # A session of its own: closing stops the browser's helper processes too, and only them.
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        pages = requests.get(f"http://127.0.0.1:{port}/json/list", timeout=5).json()
        target = next(p for p in pages if p.get("type") == "page")
        self.ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=30)
        self._ids = itertools.count(1)
        self._replies: dict[int, dict] = {}
        self._cond = threading.Condition()
        self._send_lock = threading.Lock()
        self.auth_challenges = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.call("Fetch.enable", handleAuthRequests=True)

    def _send(self, method: str, **params) -> int:
        number = next(self._ids)
        with self._send_lock:
            self.ws.send(json.dumps({"id": number, "method": method, "params": params}))
        return number

    def _read(self) -> None:
        while True:
            try:
                message = json.loads(self.ws.recv())
            except Exception:  # noqa: BLE001 - the connection closed with the browser
                return
            if "id" in message:
                with self._cond:
                    self._replies[message["id"]] = message
                    self._cond.notify_all()
            elif message.get("method") == "Fetch.requestPaused":
                self._send("Fetch.continueRequest", requestId=message["params"]["requestId"])
            elif message.get("method") == "Fetch.authRequired":
                self.auth_challenges += 1
                user, password = self.credentials
                self._send(
                    "Fetch.continueWithAuth",
                    requestId=message["params"]["requestId"],
                    authChallengeResponse={
                        "response": "ProvideCredentials",
                        "username": user,
                        "password": password,
                    },
                )

    def call(self, method: str, timeout: float = 30, **params) -> dict:
        number = self._send(method, **params)
        with self._cond:
            if not self._cond.wait_for(lambda: number in self._replies, timeout):
                raise TimeoutError(f"no answer to {method}")
            reply = self._replies.pop(number)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(data["data"]))

    def close(self) -> None:
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
