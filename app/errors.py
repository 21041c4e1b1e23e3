"""The one error path: RedfishError and the handlers that render every 4xx/5xx as a Redfish error."""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path
from typing import Any

import kombu.exceptions
import redis.exceptions
from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from fleetfish.store import GenerationRace

log = logging.getLogger("fleetfish.api")

BASE_REGISTRY_FILE = Path(__file__).parent / "data" / "Base.1.22.1.json"
RETRY_AFTER_SECONDS = 5


@functools.cache
def base_registry() -> dict[str, Any]:
    """The DMTF Base message registry bundled with the package (read once per process)."""
    return json.loads(BASE_REGISTRY_FILE.read_text(encoding="utf-8"))


def base_prefix() -> str:
    """MessageId prefix ``Base.<major>.<minor>`` as DSP0266 writes it."""
    major, minor = base_registry()["RegistryVersion"].split(".")[:2]
    return f"Base.{major}.{minor}"


def message(message_id: str, args: list[Any] | tuple = (), related: list[str] | tuple = ()) -> dict:
    """One ``@Message.ExtendedInfo`` entry from the Base registry."""
    entry = base_registry()["Messages"][message_id]
    text = entry["Message"]
    str_args = [str(a) for a in args]
    # Replace the highest placeholder first so %1 never eats the 1 of %10.
    for index in range(len(str_args), 0, -1):
        text = text.replace(f"%{index}", str_args[index - 1])
    return {
        "@odata.type": "#Message.v1_2_1.Message",
        "MessageId": f"{base_prefix()}.{message_id}",
        "Message": text,
        "MessageArgs": str_args,
        "Severity": entry.get("MessageSeverity") or entry.get("Severity", "Critical"),
        "MessageSeverity": entry.get("MessageSeverity") or entry.get("Severity", "Critical"),
        "Resolution": entry.get("Resolution", "None."),
        "RelatedProperties": list(related),
    }


class RedfishError(Exception):
    """A client-visible failure: HTTP status plus one or more Base registry messages."""

    def __init__(
        self,
        status: int,
        message_id: str,
        message_args: list[Any] | tuple = (),
        related_properties: list[str] | tuple = (),
        *,
        more: list[dict] | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message_id)
        self.status = status
        self.messages = [message(message_id, message_args, related_properties)] + (more or [])
        self.headers = headers or {}


def error_response(status: int, messages: list[dict], headers: dict | None = None) -> Response:
    first = messages[0]
    body = {
        "error": {
            "code": first["MessageId"],
            "message": first["Message"],
            "@Message.ExtendedInfo": messages,
        }
    }
    resp = Response(json.dumps(body), status=status, mimetype="application/json")
    for name, value in (headers or {}).items():
        resp.headers[name] = value
    return resp


# Werkzeug's own errors mapped onto Base messages.
def _http_messages(exc: HTTPException) -> list[dict]:
    code = exc.code or 500
    if code == 404:
        return [message("ResourceMissingAtURI", [request.path])]
    if code == 405:
        return [message("OperationNotAllowed")]
    if code == 413:
        return [message("PayloadTooLarge")]
    if code == 415:
        return [message("HeaderInvalid", [f"Content-Type: {request.content_type or ''}"])]
    if code == 400:
        return [message("UnrecognizedRequestBody")]
    if code == 401:
        return [message("NoValidSession")]
    if code == 403:
        return [message("InsufficientPrivilege")]
    if code >= 500:
        return [message("InternalError")]
    return [message("GeneralError")]


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(RedfishError)
    def _redfish(exc: RedfishError):
        log.info(
            "%s %s -> %s %s system=%s",
            request.method,
            request.path,
            exc.status,
            exc.messages[0]["MessageId"],
            (request.view_args or {}).get("system_id", "-"),
        )
        return error_response(exc.status, exc.messages, exc.headers)

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException):
        headers = {}
        if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
            headers["Allow"] = ", ".join(sorted(exc.valid_methods))
        if exc.code == 401:
            headers["WWW-Authenticate"] = 'Basic realm="fleetfish"'
        return error_response(exc.code or 500, _http_messages(exc), headers)

    def _retry_later() -> Response:
        return error_response(
            503,
            [message("ServiceTemporarilyUnavailable", [RETRY_AFTER_SECONDS])],
            {"Retry-After": str(RETRY_AFTER_SECONDS)},
        )

    def _unavailable(exc: Exception):
        log.warning("backend unavailable on %s %s: %s", request.method, request.path, exc)
        return _retry_later()

    # Redis (state store and broker) unreachable or too slow: the caller may retry later.
    # LOADING (a restarted Redis reading a large dataset) is the same for a caller; named
    # here because redis-py makes it a ConnectionError only by its class hierarchy.
    app.register_error_handler(redis.exceptions.BusyLoadingError, _unavailable)
    app.register_error_handler(redis.exceptions.ConnectionError, _unavailable)
    app.register_error_handler(redis.exceptions.TimeoutError, _unavailable)
    app.register_error_handler(kombu.exceptions.OperationalError, _unavailable)

    @app.errorhandler(GenerationRace)
    def _race(exc: GenerationRace):
        # Requests on one drive racing faster than an insert can record itself: retry shortly.
        log.warning("%s on %s %s", exc, request.method, request.path)
        return _retry_later()

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        log.exception("unexpected error on %s %s", request.method, request.path)
        return error_response(500, [message("InternalError")])
