"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902), as the apiserver applies them."""

from __future__ import annotations

import copy

from lab.kubesim import errors


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class PatchTestFailed(Exception):
    pass


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _walk(doc, pointer: str):
    """(parent, last token) for a JSON pointer; raises ApiError when a parent is missing."""
    if pointer == "":
        return None, ""
    if not pointer.startswith("/"):
        raise errors.ApiError(422, f"invalid JSON pointer {pointer!r}")
    tokens = [_unescape(t) for t in pointer[1:].split("/")]
    node = doc
    for tok in tokens[:-1]:
        try:
            node = node[int(tok)] if isinstance(node, list) else node[tok]
        except (KeyError, IndexError, ValueError, TypeError):
            raise errors.ApiError(422, f"doc is missing path: {pointer!r}: missing value") from None
    return node, tokens[-1]


def _get(doc, pointer: str):
    if pointer == "":
        return doc
    parent, tok = _walk(doc, pointer)
    try:
        return parent[int(tok)] if isinstance(parent, list) else parent[tok]
    except (KeyError, IndexError, ValueError, TypeError):
        raise errors.ApiError(422, f"doc is missing key: {pointer!r}: missing value") from None


def _add(doc, pointer: str, value):
    parent, tok = _walk(doc, pointer)
    if parent is None:
        return value
    if isinstance(parent, list):
        if tok == "-":
            parent.append(value)
        else:
            idx = int(tok)
            if idx > len(parent):
                raise errors.ApiError(422, f"add operation index out of bounds: {pointer!r}")
            parent.insert(idx, value)
    elif isinstance(parent, dict):
        parent[tok] = value
    else:
        raise errors.ApiError(422, f"add operation does not apply: {pointer!r}")
    return doc


def _remove(doc, pointer: str):
    parent, tok = _walk(doc, pointer)
    try:
        if isinstance(parent, list):
            del parent[int(tok)]
        else:
            del parent[tok]
    except (KeyError, IndexError, ValueError, TypeError):
        raise errors.ApiError(
            422, f"remove operation does not apply: doc is missing path: {pointer!r}"
        ) from None
    return doc


def json_patch(doc, ops):
    """Apply ops to a copy of doc. A failed ``test`` raises PatchTestFailed (the apiserver: 422)."""
    if not isinstance(ops, list):
        raise errors.bad_request(
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
        )
    doc = copy.deepcopy(doc)
    for op in ops:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            if path == "":
                doc = copy.deepcopy(op.get("value"))
            else:
                doc = _add(_remove(doc, path), path, copy.deepcopy(op.get("value")))
        elif kind == "test":
            try:
                actual = _get(doc, path)
            except errors.ApiError:
                actual = None  # like evanphx/json-patch: a missing path tests equal to null
            if actual != op.get("value"):
                raise PatchTestFailed(f"testing value {path} failed: test failed")
        elif kind in ("move", "copy"):
            value = copy.deepcopy(_get(doc, op.get("from", "")))
            if kind == "move":
                doc = _remove(doc, op.get("from", ""))
            doc = _add(doc, path, value)
        else:
            raise errors.ApiError(422, f"Unexpected kind: {kind}")
    return doc
