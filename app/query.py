"""Redfish query parameters $expand, $select and only: parsed before the view, applied to its body.

DSP0266 evaluates them in this order: $expand, then $select; ``only`` stands alone. A view
renders its resource as usual; ``protocol.resource`` hands the body to ``apply``, which expands
its references by rendering the referenced resources through their own views (so an expanded
member is exactly what a GET of it returns), and keeps what $select names. Views that can render
many members in one Redis pass register a batch renderer (``batch``), used instead of one view
call per member: the expanded Systems collection of a fleet is one pipeline, not N round trips.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from flask import current_app, g

from app.errors import RedfishError

# Cost grows with the fan-out of each level (the Systems collection, then every system's
# sub-resources), so the depth is bounded; ProtocolFeaturesSupported says so.
MAX_LEVELS = 2
SUPPORTED = ("$expand", "$select", "only")
_EXPAND = re.compile(r"^([.*~])(?:\(\$levels=(\d+)\))?$")
_SELECT_NAME = re.compile(r"^[A-Za-z_@#][A-Za-z0-9_@#.]*$")
# Properties a selected resource always keeps (DSP0266: $select never drops them).
ODATA_KEPT = ("@odata.id", "@odata.type", "@odata.context", "@odata.etag")

BatchRenderer = Callable[[list[str]], dict[str, dict]]
# (path pattern, renderer): filled at import by the resource modules, never changed after.
_BATCH: list[tuple[re.Pattern, BatchRenderer]] = []


@dataclass(frozen=True)
class Query:
    expand: str = ""  # "" (none), "." (subordinate), "~" (Links only) or "*" (both)
    levels: int = 0
    select: tuple[tuple[str, ...], ...] = ()  # property paths, split at "/"
    only: bool = False

    @property
    def expands(self) -> bool:
        return bool(self.expand) and self.levels > 0


NONE = Query()


def batch(pattern: str) -> Callable[[BatchRenderer], BatchRenderer]:
    """Register ``render(paths) -> {path: body}`` for the resources whose path matches
    ``pattern``; a body must be what the resource's own GET returns (``protocol.finalize``d),
    and paths the user may not see are left out."""

    def register(render: BatchRenderer) -> BatchRenderer:
        _BATCH.append((re.compile(pattern), render))
        return render

    return register


def _format_error(value: str, name: str) -> RedfishError:
    return RedfishError(400, "QueryParameterValueFormatError", [value, name])


def parse(args) -> Query:
    """The query of a request's arguments; unknown ``$`` parameters get 501 (DSP0266), bad
    values 400 with the Base message that names the parameter."""
    unsupported = [n for n in args if n.startswith("$") and n not in SUPPORTED]
    if unsupported:
        raise RedfishError(501, "QueryParameterUnsupported", [unsupported[0]])
    query = NONE
    if "$expand" in args:
        value = args.get("$expand", "")
        match = _EXPAND.match(value)
        if not match:
            raise _format_error(value, "$expand")
        levels = int(match.group(2) or 1)
        if not 1 <= levels <= MAX_LEVELS:
            raise RedfishError(
                400, "QueryParameterOutOfRange", [str(levels), "$levels", f"1-{MAX_LEVELS}"]
            )
        query = replace(query, expand=match.group(1), levels=levels)
    if "$select" in args:
        value = args.get("$select", "")
        paths = tuple(tuple(p.strip().split("/")) for p in value.split(","))
        if not all(_SELECT_NAME.match(part) for path in paths for part in path):
            raise _format_error(value, "$select")
        query = replace(query, select=paths)
    if "only" in args:
        if args.get("only", ""):
            raise _format_error(args.get("only", ""), "only")
        if query != NONE:
            raise RedfishError(400, "QueryCombinationInvalid")
        query = replace(query, only=True)
    return query


def current() -> Query:
    return g.get("query", NONE)


def is_collection(body: dict) -> bool:
    return isinstance(body.get("Members"), list) and "Members@odata.count" in body


def only_member(body: dict) -> str | None:
    """The member ``only`` answers with (None: the collection itself); 400 on a singleton."""
    if not is_collection(body):
        raise RedfishError(400, "QueryNotSupportedOnResource")
    members = body["Members"]
    return members[0].get("@odata.id") if len(members) == 1 else None


def apply(body: dict, query: Query) -> dict:
    """$expand then $select on a rendered (finalized) resource."""
    if query.expands:
        body = _expand(body, query)
    if query.select:
        body = _select(body, query.select)
    return body


def get(path: str, query: Query = NONE) -> tuple[int, Any]:
    """GET ``path`` inside this request, as its user, through its own view, under ``query``.

    Returns (status, response): the view's Response, or the RedfishError it raised.
    """
    adapter = current_app.url_map.bind("")
    saved = g.get("query", NONE)
    g.query = query
    try:
        endpoint, args = adapter.match(path.rstrip("/") or "/", "GET")
        return 200, current_app.view_functions[endpoint](**args)
    except RedfishError as exc:
        return exc.status, exc
    except Exception as exc:  # routing 404/405 of a link: leave the link as it is
        if getattr(exc, "code", None):
            return exc.code, exc
        raise
    finally:
        g.query = saved


def _references(body: dict, mode: str) -> list[dict]:
    """The reference objects (``{"@odata.id": ...}`` alone) of a resource the mode expands:
    "." outside ``Links``, "~" inside it, "*" both. Nested resources are not entered."""
    found: list[dict] = []

    def walk(value: Any, in_links: bool) -> None:
        if isinstance(value, dict):
            if set(value) == {"@odata.id"} and isinstance(value["@odata.id"], str):
                if mode == "*" or (mode == "~") == in_links:
                    found.append(value)
                return
            if "@odata.id" in value and "@odata.type" in value:
                return  # an already expanded resource
            for key, item in value.items():
                if not key.startswith("@"):
                    walk(item, in_links or key == "Links")
        elif isinstance(value, list):
            for item in value:
                walk(item, in_links)

    for key, item in body.items():
        if not key.startswith("@"):
            walk(item, key == "Links")
    return found


def _expand(body: dict, query: Query) -> dict:
    refs = _references(body, query.expand)
    if not refs:
        return body
    inner = Query(expand=query.expand, levels=query.levels - 1)
    paths = list(dict.fromkeys(ref["@odata.id"] for ref in refs))
    rendered: dict[str, dict] = {}
    for pattern, render in _BATCH:
        wanted = [p for p in paths if p not in rendered and pattern.match(p)]
        if wanted:
            for path, member in render(wanted).items():
                rendered[path] = apply(member, inner)
    for path in paths:
        if path in rendered:
            continue
        status, resp = get(path, inner)
        if status == 200 and resp.status_code == 200 and resp.mimetype == "application/json":
            rendered[path] = json.loads(resp.get_data())
    for ref in refs:
        member = rendered.get(ref["@odata.id"])
        if member is not None:
            ref.clear()
            ref.update(member)
    return body


def _select(body: dict, paths: tuple[tuple[str, ...], ...]) -> dict:
    """Only the selected properties (and each resource's @odata identity) of ``body``; a path
    through an array applies to each element, so ``Members/PowerState`` selects the power state
    of every expanded member."""
    out = {k: body[k] for k in ODATA_KEPT if k in body}
    for head in dict.fromkeys(path[0] for path in paths):
        if head not in body:
            continue
        rest = tuple(path[1:] for path in paths if path[0] == head)
        out[head] = body[head] if () in rest else _select_value(body[head], rest)
    return out


def _select_value(value: Any, paths: tuple[tuple[str, ...], ...]) -> Any:
    if isinstance(value, dict):
        return _select(value, paths)
    if isinstance(value, list):
        return [_select_value(item, paths) for item in value]
    return value
