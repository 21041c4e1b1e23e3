"""Generic CRUD with apiserver semantics: lists with paging, optimistic updates, patches, status."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable

import yaml

from lab.kubesim import admission, errors
from lab.kubesim.kinds import DV, NAMESPACE, SECRET, VM, Kind
from lab.kubesim.patch import PatchTestFailed, json_patch, merge_patch
from lab.kubesim.selectors import field_matcher, label_matcher
from lab.kubesim.store import ObjectStore

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"

Hook = Callable[[Kind, dict], None]


class ResourceApi:
    """What the HTTP layer calls for /api and /apis resource paths.

    ``on_creating`` defaults new objects (finalizers); ``on_created`` / ``on_deleted`` let the
    controllers react (CDI starts an import, stops it on deletion).
    """

    def __init__(self, store: ObjectStore):
        self.store = store
        self.on_creating: list[Hook] = []  # defaulting before the write (finalizers)
        self.on_created: list[Hook] = []
        self.on_deleted: list[Hook] = []

    # -- reads -------------------------------------------------------------------------------

    def get(self, kind: Kind, ns: str, name: str) -> dict:
        obj = self.store.get(kind, ns, name)
        if obj is None:
            raise errors.not_found(kind, name)
        return obj

    def list(self, kind: Kind, ns: str | None, query: dict) -> dict:
        labels = label_matcher(query.get("labelSelector"))
        fields = field_matcher(query.get("fieldSelector"))
        items, rv = self.store.list(kind, ns)
        items = [o for o in items if labels(o["metadata"].get("labels") or {}) and fields(o)]
        start = 0
        if query.get("continue"):
            token = _decode_continue(query["continue"])
            keys = [(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in items]
            start = next((i for i, k in enumerate(keys) if k > token), len(items))
        meta: dict = {"resourceVersion": str(rv)}
        limit = int(query.get("limit") or 0)
        page = items[start:]
        if limit > 0 and len(page) > limit:
            page = page[:limit]
            last = page[-1]["metadata"]
            meta["continue"] = _encode_continue(last.get("namespace", ""), last["name"], rv)
            meta["remainingItemCount"] = len(items) - start - limit
        return {
            "apiVersion": kind.api_version,
            "kind": f"{kind.kind}List",
            "metadata": meta,
            "items": page,
        }

    # -- writes ------------------------------------------------------------------------------

    def create(self, kind: Kind, ns: str | None, body: dict) -> dict:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request was in an unknown format")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if kind.namespaced:
            if meta.get("namespace") and meta["namespace"] != ns:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = ns
            if self.store.get(NAMESPACE, "", ns) is None:
                raise errors.not_found(NAMESPACE, ns)
        if not meta.get("name") and not meta.get("generateName"):
            raise errors.invalid(
                kind,
                "",
                [
                    errors.cause(
                        "name or generateName is required", "metadata.name", "FieldValueRequired"
                    )
                ],
            )
        meta.pop("resourceVersion", None)
        if kind.has_status:
            obj.pop(
                "status", None
            )  # status belongs to the controllers, as with a status subresource
        self._admit(kind, obj, creating=True)
        for hook in self.on_creating:
            hook(kind, obj)
        created = self.store.create(kind, obj)
        for hook in self.on_created:
            hook(kind, created)
        return created

    def replace(self, kind: Kind, ns: str, name: str, body: dict, status: bool = False) -> dict:
        # read, check and write under the store lock: controllers write status concurrently
        with self.store.cond:
            return self._replace(kind, ns, name, body, status)

    def _replace(self, kind: Kind, ns: str, name: str, body: dict, status: bool) -> dict:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request was in an unknown format")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request("the name of the object does not match the name on the URL")
        meta["name"] = name
        if kind.namespaced:
            meta["namespace"] = ns
        current = self.get(kind, ns, name)
        rv = meta.get("resourceVersion")
        if not rv and kind.custom:
            raise errors.invalid(
                kind,
                name,
                [
                    errors.cause(
                        "Invalid value: 0x0: must be specified for an update",
                        "metadata.resourceVersion",
                    )
                ],
            )
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise errors.conflict(kind, name)
        obj = self._split_status(kind, current, obj, status)
        if not status:
            self._admit(kind, obj, creating=False)
        return self.store.replace(kind, obj, rv)

    def patch(
        self,
        kind: Kind,
        ns: str,
        name: str,
        raw: bytes,
        content_type: str,
        query: dict,
        status: bool = False,
    ) -> dict:
        with self.store.cond:
            return self._patch(kind, ns, name, raw, content_type, query, status)

    def _patch(
        self,
        kind: Kind,
        ns: str,
        name: str,
        raw: bytes,
        content_type: str,
        query: dict,
        status: bool,
    ) -> dict:
        ctype = (content_type or "").split(";")[0].strip().lower()
        if ctype == STRATEGIC and not kind.custom:
            ctype = MERGE  # good enough for the PVC/Namespace fields anyone patches in the lab
        if ctype not in (MERGE, JSON_PATCH, APPLY):
            raise errors.ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types include: "
                f"{JSON_PATCH}, {MERGE}, {APPLY}",
                "UnsupportedMediaType",
            )
        try:
            if ctype == APPLY:
                if not query.get("fieldManager"):
                    raise errors.bad_request(
                        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                        "is required for apply patch"
                    )
                patch = yaml.safe_load(raw or b"{}")
            else:
                patch = json.loads(raw or b"null")
        except (ValueError, yaml.YAMLError) as exc:
            raise errors.bad_request(f"error decoding patch: {exc}") from None
        current = self.store.get(kind, ns, name)
        if current is None:
            if ctype == APPLY and not status:
                return self.create(kind, ns, patch)
            raise errors.not_found(kind, name)
        if ctype == JSON_PATCH:
            try:
                obj = json_patch(current, patch)
            except PatchTestFailed as exc:
                raise errors.ApiError(
                    422,
                    f"the server rejected our request due to an error in our request: {exc}",
                    "Invalid",
                ) from None
        else:
            if not isinstance(patch, dict):
                raise errors.bad_request("the body of the request was in an unknown format")
            obj = merge_patch(current, patch)
        if not isinstance(obj, dict):
            raise errors.ApiError(
                422, "the patch produced an object that is not a JSON object", "Invalid"
            )
        meta = obj.setdefault("metadata", {})
        meta["name"], meta["namespace"] = name, current["metadata"].get("namespace")
        if kind.namespaced is False:
            meta.pop("namespace", None)
        rv = meta.get("resourceVersion")
        if rv == current["metadata"]["resourceVersion"]:
            rv = None  # unchanged by the patch: unconditional
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise errors.conflict(kind, name)
        obj = self._split_status(kind, current, obj, status)
        if not status:
            self._admit(kind, obj, creating=False)
        return self.store.replace(kind, obj, current["metadata"]["resourceVersion"])

    def delete(self, kind: Kind, ns: str, name: str) -> dict:
        # 200 with the object either way: gone, or carrying deletionTimestamp until finalized
        obj, _gone = self.store.request_delete(kind, ns, name)
        for hook in self.on_deleted:
            hook(kind, obj)
        return obj

    # -- helpers -----------------------------------------------------------------------------

    @staticmethod
    def _split_status(kind: Kind, current: dict, obj: dict, status: bool) -> dict:
        """The main resource ignores status changes; /status ignores everything but status."""
        if not kind.has_status:
            return obj
        if status:
            merged = copy.deepcopy(current)
            merged["status"] = obj.get("status", {})
            return merged
        if "status" in current:
            obj["status"] = copy.deepcopy(current["status"])
        else:
            obj.pop("status", None)
        return obj

    @staticmethod
    def _admit(kind: Kind, obj: dict, creating: bool) -> None:
        if kind is VM:
            admission.validate_vm(obj, creating)
        elif kind is DV:
            admission.validate_dv(obj)
        elif kind is SECRET and obj.get("stringData"):
            # The apiserver folds write-only stringData into data (base64) and keeps no copy.
            data = obj.setdefault("data", {}) or {}
            for key, value in obj.pop("stringData").items():
                data[key] = base64.b64encode(str(value).encode()).decode()
            obj["data"] = data


def _encode_continue(ns: str, name: str, rv: int) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": [ns, name]}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_continue(token: str) -> tuple[str, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        ns, name = data["start"]
        return ns, name
    except (ValueError, KeyError, TypeError):
        raise errors.bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion"
        ) from None
