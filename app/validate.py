"""Request-body validation for actions and PATCH, reporting every problem with its Base message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.errors import RedfishError, message

_TYPE_NAMES = {str: "string", bool: "boolean", dict: "object", int: "integer"}


@dataclass(frozen=True)
class Param:
    kind: type
    required: bool = False
    allowed: tuple[str, ...] = ()
    nullable: bool = False


def pointer(*segments: str) -> str:
    """A JSON pointer (RFC 6901) in Redfish's ``#/A/B`` form, ``~`` and ``/`` escaped."""
    return "#/" + "/".join(s.replace("~", "~0").replace("/", "~1") for s in segments)


def _is_type(value: Any, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _raise(errors: list[dict], status: int = 400) -> None:
    if errors:
        first = errors[0]
        exc = RedfishError(
            status,
            first["MessageId"].rsplit(".", 1)[-1],
            first["MessageArgs"],
            first["RelatedProperties"],
            more=errors[1:],
        )
        exc.messages[0] = first  # as built, with any Resolution the caller wrote
        raise exc


def action_params(action: str, body: dict[str, Any], spec: dict[str, Param]) -> dict[str, Any]:
    """Check an action's parameters; returns them, or raises 400 listing every problem."""
    errors: list[dict] = []
    for name in body:
        if name not in spec:
            errors.append(message("ActionParameterUnknown", [action, name], [pointer(name)]))
    for name, param in spec.items():
        if name not in body:
            if param.required:
                errors.append(message("ActionParameterMissing", [action, name], [pointer(name)]))
            continue
        value = body[name]
        if value is None and param.nullable:
            continue
        if not _is_type(value, param.kind):
            errors.append(
                message(
                    "ActionParameterValueTypeError", [show(value), name, action], [pointer(name)]
                )
            )
        elif param.allowed and value not in param.allowed:
            errors.append(
                message("ActionParameterValueNotInList", [value, name, action], [pointer(name)])
            )
    _raise(errors)
    return {k: v for k, v in body.items() if v is not None}


def patch_object(
    body: dict[str, Any],
    writable: dict[str, Param],
    readonly: set[str],
    prefix: str = "",
) -> tuple[dict[str, Any], list[dict]]:
    """Check one level of a PATCH body; returns (accepted values, error messages)."""
    accepted: dict[str, Any] = {}
    errors: list[dict] = []
    parents = [p for p in prefix.split("/") if p]
    for name, value in body.items():
        path = f"{prefix}{name}"
        related = [pointer(*parents, name)]
        if name in writable:
            param = writable[name]
            if value is None and param.nullable:
                accepted[name] = None
            elif not _is_type(value, param.kind):
                errors.append(message("PropertyValueTypeError", [show(value), path], related))
            elif param.allowed and value not in param.allowed:
                errors.append(message("PropertyValueNotInList", [value, path], related))
            else:
                accepted[name] = value
        elif name in readonly or name.startswith("@") or "@" in name:
            errors.append(message("PropertyNotWritable", [path], related))
        else:
            errors.append(message("PropertyUnknown", [path], related))
    return accepted, errors


def raise_if(errors: list[dict]) -> None:
    _raise(errors)


def show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return type(value).__name__
    return str(value)
