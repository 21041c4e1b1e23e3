"""Kubernetes ``Status`` error bodies, written the way the apiserver and virt-api write them."""

from __future__ import annotations

from lab.kubesim.kinds import Kind

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """An error answer: raise it anywhere in a handler, the server renders ``body``."""

    def __init__(
        self, code: int, message: str, reason: str | None = None, details: dict | None = None
    ):
        super().__init__(message)
        self.code = code
        self.body = status_body(code, message, reason or REASONS.get(code, "Unknown"), details)


def status_body(code: int, message: str, reason: str, details: dict | None = None) -> dict:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def success_status(kind: Kind, name: str, uid: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name, "group": kind.group, "kind": kind.plural, "uid": uid},
    }


def _details(kind: Kind, name: str, kind_name: str | None = None) -> dict:
    d = {"name": name, "kind": kind_name or kind.plural}
    if kind.group:
        d["group"] = kind.group
    return d


def not_found(kind: Kind, name: str) -> ApiError:
    return ApiError(404, f'{kind.qualified} "{name}" not found', "NotFound", _details(kind, name))


def already_exists(kind: Kind, name: str, being_deleted: bool = False) -> ApiError:
    # the API server says so when the name is held by an object still finalizing its deletion
    prefix = "object is being deleted: " if being_deleted else ""
    return ApiError(
        409,
        f'{prefix}{kind.qualified} "{name}" already exists',
        "AlreadyExists",
        _details(kind, name),
    )


def conflict(kind: Kind, name: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {kind.qualified} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        "Conflict",
        _details(kind, name),
    )


def invalid(kind: Kind, name: str, causes: list[dict], webhook: str | None = None) -> ApiError:
    """422. ``causes`` are ``{reason, message, field}``; a webhook denial prefixes the webhook name."""
    if webhook:
        message = f'admission webhook "{webhook}" denied the request: ' + ", ".join(
            c["message"] for c in causes
        )
    else:
        parts = [
            f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes
        ]
        qualified_kind = f"{kind.kind}.{kind.group}" if kind.group else kind.kind
        message = f'{qualified_kind} "{name}" is invalid: ' + ", ".join(parts)
    details = _details(kind, name, kind.kind)
    details["causes"] = causes
    return ApiError(422, message, "Invalid", details)


def cause(message: str, field: str = "", reason: str = "FieldValueInvalid") -> dict:
    return {"reason": reason, "message": message, "field": field}


def subresource_conflict(singular: str, name: str, message: str) -> ApiError:
    """virt-api's conflicts name the resource in the singular: ``virtualmachine.kubevirt.io``."""
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {singular}.kubevirt.io "{name}": {message}',
        "Conflict",
        {"name": name, "group": "kubevirt.io", "kind": singular},
    )


def subresource_not_found(singular: str, name: str) -> ApiError:
    return ApiError(
        404,
        f'{singular}.kubevirt.io "{name}" not found',
        "NotFound",
        {"name": name, "group": "kubevirt.io", "kind": singular},
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "BadRequest")


def internal(message: str) -> ApiError:
    return ApiError(
        500,
        f"Internal error occurred: {message}",
        "InternalError",
        {"causes": [{"message": message}]},
    )


def expired(message: str) -> ApiError:
    return ApiError(410, message, "Expired")
