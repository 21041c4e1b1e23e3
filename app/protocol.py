"""DSP0266 plumbing shared by every resource: JSON responses, headers, ETags and request bodies."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from flask import Flask, Response, g, request
from werkzeug.exceptions import RequestEntityTooLarge

from app import query
from app.errors import RedfishError

JSON_MIMETYPE = "application/json"
SCHEMA_BASE = "http://redfish.dmtf.org/schemas/v1"
READ = ("GET", "HEAD")


def odata_context(odata_type: str) -> str:
    """``#ComputerSystem.v1_27_0.ComputerSystem`` -> ``/redfish/v1/$metadata#ComputerSystem.ComputerSystem``."""
    namespace, _, entity = odata_type.lstrip("#").rpartition(".")
    return f"/redfish/v1/$metadata#{namespace.split('.')[0]}.{entity}"


def schema_link(odata_type: str) -> str:
    namespace = odata_type.lstrip("#").rpartition(".")[0]
    return f"{SCHEMA_BASE}/{namespace}.json"


def compute_etag(body: dict) -> str:
    """Strong ETag of a rendered resource: a hash of its JSON without the etag itself.

    Rendering is deterministic (same code, same key order), so the text is stable without
    sort_keys; ``resource`` hashes the very text it sends, encoding the body only once.
    """
    payload = {k: v for k, v in body.items() if k != "@odata.etag"}
    return _etag_of(json.dumps(payload))


def _etag_of(text: str) -> str:
    return f'"{hashlib.sha256(text.encode()).hexdigest()[:20]}"'


def finalize(body: dict, *, etag: bool = True) -> dict:
    """The body as sent: @odata.context added and, for ETag-carrying resources, @odata.etag."""
    odata_type = body.get("@odata.type", "")
    if odata_type and "@odata.context" not in body:
        body = {"@odata.context": odata_context(odata_type), **body}
    if etag:
        body["@odata.etag"] = compute_etag(body)
    return body


def resource(
    body: dict,
    *,
    allow: tuple[str, ...] = READ,
    status: int = 200,
    headers: dict[str, str] | None = None,
    etag: bool = True,
) -> Response:
    """A Redfish resource response: @odata.context/etag filled in, ETag/Allow/Link headers set,
    and the request's query ($expand, $select, only) applied to a GET."""
    body = finalize(body, etag=False)
    body.pop("@odata.etag", None)
    wanted = query.current()
    if wanted != query.NONE and status == 200 and request.method in READ:
        if wanted.only:
            member = query.only_member(body)
            if member:
                _, answer = query.get(member)
                if isinstance(answer, Exception):
                    raise answer
                return answer
        else:
            body = query.apply(body, wanted)
    text = json.dumps(body)
    tag = ""
    if etag:
        tag = _etag_of(text)
        # Append "@odata.etag" as the last member: the same document finalize() builds.
        text = f"{text[:-1]}, {json.dumps('@odata.etag')}: {json.dumps(tag)}}}" if body else text
    resp = Response(text, status=status, mimetype=JSON_MIMETYPE)
    if tag:
        resp.headers["ETag"] = tag
    resp.headers["Allow"] = ", ".join(allow)
    odata_type = body.get("@odata.type", "")
    if odata_type:
        resp.headers["Link"] = f"<{schema_link(odata_type)}>; rel=describedby"
    for name, value in (headers or {}).items():
        resp.headers[name] = value
    return resp


def no_content(
    headers: dict[str, str] | None = None, allow: tuple[str, ...] = ("POST",)
) -> Response:
    resp = Response(status=204)
    resp.headers["Allow"] = ", ".join(allow)
    for name, value in (headers or {}).items():
        resp.headers[name] = value
    return resp


def collection(odata_id: str, odata_type: str, name: str, member_ids: list[str], **extra) -> dict:
    return {
        "@odata.id": odata_id,
        "@odata.type": odata_type,
        "Name": name,
        "Members@odata.count": len(member_ids),
        "Members": [{"@odata.id": m} for m in member_ids],
        **extra,
    }


def json_body(*, allow_empty: bool = True) -> dict[str, Any]:
    """The request body as a JSON object; empty body (with or without Content-Type) reads as {}."""
    try:
        raw = request.get_data(cache=True)
    except RequestEntityTooLarge:
        raise RedfishError(413, "PayloadTooLarge") from None
    if not raw.strip():
        if allow_empty:
            return {}
        raise RedfishError(400, "EmptyJSON")
    mimetype = request.mimetype or ""
    # A body without Content-Type is read as JSON (lenient clients); any other type is refused.
    if mimetype and mimetype != JSON_MIMETYPE and not mimetype.endswith("+json"):
        raise RedfishError(415, "HeaderInvalid", [f"Content-Type: {request.content_type}"])
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        # RecursionError: nesting deeper than the interpreter's stack (a few KiB of "[[[[...").
        raise RedfishError(400, "MalformedJSON") from None
    if not isinstance(data, dict):
        raise RedfishError(400, "UnrecognizedRequestBody")
    return data


def if_match_ok(current_etag: str) -> bool:
    """If-Match check; a W/ prefix is tolerated because some clients weaken the tag they got."""
    header = request.headers.get("If-Match")
    if not header:
        return True
    tags = [t.strip() for t in header.split(",") if t.strip()]
    if "*" in tags:
        return True
    current = current_etag.removeprefix("W/")
    return any(t.removeprefix("W/") == current for t in tags)


def install_request_checks(app: Flask) -> None:
    """Protocol checks that come before authentication (they answer the same for everyone)."""

    @app.before_request
    def _protocol_checks():
        version = request.headers.get("OData-Version")
        if version is not None and version.strip() != "4.0":
            raise RedfishError(412, "HeaderInvalid", [f"OData-Version: {version}"])
        # DSP0266: unsupported query parameters starting with $ get 501, bad values of the
        # supported ones 400; other parameters are ignored. An unknown URI or method keeps its
        # 404/405, whatever its query.
        if request.routing_exception is not None:
            return
        g.query = query.parse(request.args)
        if g.query != query.NONE and request.method not in READ:
            raise RedfishError(400, "QueryNotSupportedOnOperation")


def install(app: Flask) -> None:
    """Headers every response carries, whatever produced it."""

    @app.after_request
    def _headers(resp: Response) -> Response:
        resp.headers["OData-Version"] = "4.0"
        resp.headers["Cache-Control"] = "no-cache"
        if resp.mimetype == JSON_MIMETYPE:
            resp.headers["Content-Type"] = "application/json; charset=utf-8"
        return resp


class StripTrailingSlash:
    """WSGI middleware: ``/redfish/v1/Systems/`` routes exactly like ``/redfish/v1/Systems``.

    Done before routing so no redirect is ever sent (clients such as sushy do not expect one).
    """

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if len(path) > 1 and path.endswith("/"):
            environ["PATH_INFO"] = path.rstrip("/") or "/"
        return self.wsgi_app(environ, start_response)
