"""The read-only fleet page ``/fleet`` and its data ``/fleet/status.json`` (same auth as Redfish).

The page is static HTML with a small inline script that polls the JSON and redraws the table;
it loads nothing else (no CDN: the service may run without internet). The rows come from
``fleetfish.fleet``, filtered by the user's scope like ``/redfish/v1/Systems``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
import time
from pathlib import Path

from flask import Blueprint, Response, g, jsonify

from app.context import store
from fleetfish.fleet import fleet_status

bp = Blueprint("fleet_view", __name__)

PAGE_FILE = Path(__file__).parent / "data" / "fleet.html"
EVENTS_PER_NODE = 5


@functools.cache
def page() -> tuple[str, str]:
    """(HTML, Content-Security-Policy): only the page's own inline script and style may run."""
    html = PAGE_FILE.read_text(encoding="utf-8")

    def digest(tag: str) -> str:
        body = re.search(rf"<{tag}>(.*?)</{tag}>", html, re.S).group(1)
        return "'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'"

    policy = (
        f"default-src 'none'; script-src {digest('script')}; style-src {digest('style')}; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    return html, policy


@bp.get("/fleet")
def fleet_page():
    html, policy = page()
    resp = Response(html, mimetype="text/html")
    resp.headers["Content-Security-Policy"] = policy
    resp.headers["X-Content-Type-Options"] = "nosniff"
    return resp


@bp.get("/fleet/status.json")
def fleet_status_json():
    user = g.user
    allows = None if user is None or user.scope.unrestricted else user.scope.allows
    rows = fleet_status(store().r, allows, events=EVENTS_PER_NODE)
    return jsonify({"time": time.time(), "systems": rows})
