"""The only module that talks to Kubernetes: KubeVirt VMs/VMIs, CDI DataVolumes, subresources.

Every call has a timeout and raises one of the domain errors below instead of ``ApiException``,
each one of the kinds in ``workers/errors.py``, so tasks can retry ``Transient`` with backoff
and fail clearly on the others. Pinned to the
``kubernetes`` 37 client (OpenAPI generator v7: ``param_serialize`` + ``call_api``); one
``ApiClient`` per process is shared by all worker threads (its urllib3 PoolManager is
thread-safe and synchronous calls keep no per-request state on the client).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from fleetfish.settings import Settings
from workers import errors

log = logging.getLogger("fleetfish.kubevirt")

KUBEVIRT = ("kubevirt.io", "v1")
CDI = ("cdi.kubevirt.io", "v1beta1")
INSTANCETYPES = ("instancetype.kubevirt.io", "v1beta1")
SUBRESOURCES = "/apis/subresources.kubevirt.io/v1"
VM_PLURAL = "virtualmachines"
VMI_PLURAL = "virtualmachineinstances"
DV_PLURAL = "datavolumes"
INSTANCETYPE_PLURAL = "virtualmachineinstancetypes"
CLUSTER_INSTANCETYPE_PLURAL = "virtualmachineclusterinstancetypes"

# The DataVolumes fleetfish creates (workers/media.py labels them so).
MANAGED_DVS = "app.kubernetes.io/managed-by=fleetfish"
# (connect, read) seconds for every ordinary call; watches get their own read timeout.
REQUEST_TIMEOUT = (5.0, 20.0)
UPDATE_ATTEMPTS = 5
LIST_PAGES = 100
LIST_PAGE_SIZE = 500


class KubeError(errors.WorkError):
    """A Kubernetes call failed; ``status`` is the HTTP code (0 without a response)."""

    def __init__(self, message: str, status: int = 0, reason: str = ""):
        super().__init__(message)
        self.status = status
        self.reason = reason


class NotFound(KubeError, errors.Refused):
    """404: the object (VM, VMI, DataVolume) does not exist."""


class Conflict(KubeError, errors.Refused):
    """409: stale resourceVersion, or a subresource refusing ("VM is not running")."""


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists on create."""


class Gone(KubeError, errors.Stale):
    """410: the watch resourceVersion is too old; relist."""


class Invalid(KubeError, errors.Refused):
    """400/401/403/415/422: the request itself is wrong; retrying cannot help."""


class Transient(KubeError, errors.Transient):
    """5xx, 429, timeouts, connection errors: retry with backoff."""


def _status_message(exc: ApiException) -> tuple[str, str]:
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    if not isinstance(body, dict):
        body = {}
    return str(body.get("message") or exc.reason or ""), str(body.get("reason") or "")


def map_api_exception(exc: ApiException, what: str) -> KubeError:
    """Translate an ApiException into the domain error a task can act on."""
    status = int(exc.status or 0)
    message, reason = _status_message(exc)
    text = f"{what}: {message}" if message else what
    if status == 404:
        return NotFound(text, status, reason)
    if status == 409:
        cls = AlreadyExists if reason == "AlreadyExists" else Conflict
        return cls(text, status, reason)
    if status == 410:
        return Gone(text, status, reason)
    if status == 0 or status == 429 or status >= 500:
        return Transient(text, status, reason)
    return Invalid(text, status, reason)


@contextmanager
def _errors(what: str) -> Iterator[None]:
    try:
        yield
    except ApiException as exc:
        raise map_api_exception(exc, what) from exc
    except (urllib3.exceptions.HTTPError, OSError, TimeoutError) as exc:
        raise Transient(f"{what}: {type(exc).__name__}: {exc}") from exc


def _create_or_replace(what: str, create: Callable[[], Any], replace: Callable[[], Any]) -> None:
    """POST, or PUT when the object exists already (its content may have changed)."""
    try:
        with _errors(f"create {what}"):
            create()
    except AlreadyExists:
        with _errors(f"replace {what}"):
            replace()


def _found(what: str, call: Callable[[], Any]) -> bool:
    """Make the call; False when the object is not there (404)."""
    try:
        with _errors(what):
            call()
        return True
    except NotFound:
        return False


def import_client_modules() -> None:
    """Import what the kubernetes client imports only on first use of an API's name (its module
    and the models it returns), for the two APIs used here: a parent that forks the workers
    (workers/host.py) then shares them instead of each child importing its own."""
    client.CoreV1Api, client.CustomObjectsApi  # noqa: B018


def load_api_client(settings: Settings, pool_size: int = 32) -> client.ApiClient:
    """ApiClient from ``settings.kubeconfig``, else in-cluster, else ``~/.kube/config``."""
    configuration = client.Configuration()
    if settings.kubeconfig:
        config.load_kube_config(config_file=settings.kubeconfig, client_configuration=configuration)
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except ConfigException:
            config.load_kube_config(
                config_file=os.path.expanduser("~/.kube/config"),
                client_configuration=configuration,
            )
    # One pool slot per worker thread plus the watcher's streams; one quick urllib3 retry for
    # a dropped keep-alive connection, the rest is the task's backoff.
    configuration.connection_pool_maxsize = pool_size
    configuration.retries = 1
    return client.ApiClient(configuration)


class RawWatch:
    """A watch stream decoded once per line into plain dicts (the client's ``watch.Watch``
    turns every event into JSON and back through its models); ``stop()`` from another thread
    ends it."""

    def __init__(self):
        self._stopped = False
        self._resp = None

    def stop(self) -> None:
        self._stopped = True
        resp = self._resp
        sock = getattr(getattr(resp, "connection", None), "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stream(self, func, *args, **kwargs) -> Iterator[dict]:
        resp = func(*args, watch=True, _preload_content=False, **kwargs)
        self._resp = resp
        try:
            for line in watch.watch.iter_resp_lines(resp):
                if self._stopped:
                    return
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    # 410 Expired comes as an ERROR event on an open stream, not as a status.
                    raise ApiException(
                        status=int(obj.get("code") or 500),
                        reason=f"{obj.get('reason')}: {obj.get('message')}",
                    )
                yield {"type": event.get("type"), "object": obj}
        finally:
            self._resp = None
            resp.close()
            resp.release_conn()


class KubeVirt:
    """KubeVirt/CDI calls for fleetfish. Methods return plain dicts as the API serves them."""

    def __init__(self, api_client: client.ApiClient, settings: Settings):
        self.api = api_client
        self.custom = client.CustomObjectsApi(api_client)
        self.settings = settings

    @classmethod
    def from_settings(cls, settings: Settings) -> KubeVirt:
        return cls(load_api_client(settings), settings)

    def close(self) -> None:
        self.api.close()

    # -- VirtualMachines ---------------------------------------------------------------------

    def get_vm(self, ns: str, name: str) -> dict:
        """GET virtualmachines/{name}. Raises NotFound, Transient."""
        with _errors(f"get VM {ns}/{name}"):
            return self.custom.get_namespaced_custom_object(
                *KUBEVIRT, ns, VM_PLURAL, name, _request_timeout=REQUEST_TIMEOUT
            )

    def list_vms(self) -> tuple[list[dict], dict[str, str]]:
        """LIST virtualmachines in the configured namespaces (all when none) with the label
        selector. Returns (items, {namespace or "": resourceVersion}). Raises Transient."""
        return self._list_all(KUBEVIRT, VM_PLURAL, self.settings.label_selector)

    def replace_vm(self, vm: dict) -> dict:
        """PUT virtualmachines/{name} with its resourceVersion. Raises Conflict on a stale one,
        Invalid when the webhook rejects it (e.g. duplicate bootOrder), NotFound, Transient."""
        meta = vm["metadata"]
        with _errors(f"update VM {meta['namespace']}/{meta['name']}"):
            return self.custom.replace_namespaced_custom_object(
                *KUBEVIRT,
                meta["namespace"],
                VM_PLURAL,
                meta["name"],
                vm,
                _request_timeout=REQUEST_TIMEOUT,
            )

    def update_vm(
        self,
        ns: str,
        name: str,
        mutate: Callable[[dict], bool | None],
        current: dict | None = None,
    ) -> dict:
        """Read-modify-PUT a VM, retried on 409 (bounded, ``UPDATE_ATTEMPTS``).

        ``mutate`` edits the VM in place and returns False when nothing needs writing (then no
        PUT happens). ``current``, a VM the caller has just read, saves the first GET: the PUT
        carries its resourceVersion, so a VM changed since answers 409 and is read again.
        Returns the VM as stored. Raises NotFound, Invalid, Transient, Conflict after the last
        attempt.
        """
        last: Conflict | None = None
        for attempt in range(UPDATE_ATTEMPTS):
            vm = current if attempt == 0 and current is not None else self.get_vm(ns, name)
            edited = copy.deepcopy(vm)
            if mutate(edited) is False or edited == vm:
                return vm
            try:
                return self.replace_vm(edited)
            except AlreadyExists:
                raise
            except Conflict as exc:
                last = exc
                log.debug("VM %s/%s changed meanwhile, retrying: %s", ns, name, exc)
        assert last is not None
        raise last

    # -- VirtualMachineInstances -------------------------------------------------------------

    def get_vmi(self, ns: str, name: str) -> dict | None:
        """GET virtualmachineinstances/{name}; None when the VM has no VMI. Raises Transient."""
        try:
            with _errors(f"get VMI {ns}/{name}"):
                return self.custom.get_namespaced_custom_object(
                    *KUBEVIRT, ns, VMI_PLURAL, name, _request_timeout=REQUEST_TIMEOUT
                )
        except NotFound:
            return None

    def list_vmis(self) -> tuple[list[dict], dict[str, str]]:
        """LIST virtualmachineinstances in the configured namespaces (no label selector: VMIs
        carry the template's labels, not the VM's). Raises Transient."""
        return self._list_all(KUBEVIRT, VMI_PLURAL, "")

    # -- subresources (virt-api, PUT) --------------------------------------------------------

    def start_vm(self, ns: str, name: str) -> None:
        """PUT vm/start. Raises Conflict ("VM is already running", strategy Always/Once),
        Transient (500 "start/stop already underway"), NotFound."""
        self._subresource(VM_PLURAL, ns, name, "start", {})

    def stop_vm(self, ns: str, name: str, grace_period: int | None = None) -> None:
        """PUT vm/stop; ``grace_period=0`` is a force-off. Raises Conflict ("VM is not
        running"), NotFound, Transient."""
        body = {} if grace_period is None else {"gracePeriod": grace_period}
        self._subresource(VM_PLURAL, ns, name, "stop", body)

    def restart_vm(self, ns: str, name: str, force: bool = False) -> None:
        """PUT vm/restart (new VMI, template changes apply); force sends gracePeriodSeconds 0.
        Raises Conflict (not running / Halted / Once), NotFound, Transient."""
        body = {"gracePeriodSeconds": 0} if force else {}
        self._subresource(VM_PLURAL, ns, name, "restart", body)

    def pause_vmi(self, ns: str, name: str) -> None:
        """PUT vmi/pause. Raises Conflict (not running / already paused), NotFound."""
        self._subresource(VMI_PLURAL, ns, name, "pause", {})

    def unpause_vmi(self, ns: str, name: str) -> None:
        """PUT vmi/unpause. Raises Conflict (not paused), NotFound."""
        self._subresource(VMI_PLURAL, ns, name, "unpause", {})

    def _subresource(self, plural: str, ns: str, name: str, verb: str, body: dict | None) -> None:
        path = f"{SUBRESOURCES}/namespaces/{ns}/{plural}/{name}/{verb}"
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        what = f"{verb} {plural[:-1]} {ns}/{name}"
        with _errors(what):
            # param_serialize drops a falsy body; virt-api treats a missing body as {}.
            request = self.api.param_serialize(
                "PUT", path, header_params=headers, body=body, auth_settings=["BearerToken"]
            )
            response = self.api.call_api(*request, _request_timeout=REQUEST_TIMEOUT)
            response.read()
            if not 200 <= response.status <= 299:
                text = (response.data or b"").decode("utf-8", "replace")
                raise ApiException.from_response(http_resp=response, body=text, data=None)

    # -- DataVolumes -------------------------------------------------------------------------

    def create_dv(self, ns: str, body: dict) -> dict:
        """POST datavolumes. Raises AlreadyExists, Invalid, Transient."""
        with _errors(f"create DataVolume {ns}/{body['metadata']['name']}"):
            return self.custom.create_namespaced_custom_object(
                *CDI, ns, DV_PLURAL, body, _request_timeout=REQUEST_TIMEOUT
            )

    def get_dv(self, ns: str, name: str) -> dict:
        """GET datavolumes/{name}. Raises NotFound, Transient."""
        with _errors(f"get DataVolume {ns}/{name}"):
            return self.custom.get_namespaced_custom_object(
                *CDI, ns, DV_PLURAL, name, _request_timeout=REQUEST_TIMEOUT
            )

    def delete_dv(self, ns: str, name: str) -> bool:
        """DELETE datavolumes/{name} (CDI deletes its PVC). False when it was already gone."""
        try:
            with _errors(f"delete DataVolume {ns}/{name}"):
                self.custom.delete_namespaced_custom_object(
                    *CDI, ns, DV_PLURAL, name, _request_timeout=REQUEST_TIMEOUT
                )
            return True
        except NotFound:
            return False

    def list_managed_dvs(self) -> tuple[list[dict], dict[str, str]]:
        """LIST fleetfish's DataVolumes in the configured namespaces (all when none).
        Returns (items, {namespace or "": resourceVersion}). Raises Transient."""
        return self._list_all(CDI, DV_PLURAL, MANAGED_DVS)

    def list_dvs(self, ns: str, label_selector: str) -> list[dict]:
        """LIST datavolumes in one namespace by label selector. Raises Transient."""
        items, _ = self._list_ns(CDI, DV_PLURAL, ns, label_selector)
        return items

    # -- Instancetypes (CPU and memory of a VM that names one) ---------------------------------

    def get_instancetype(self, ns: str, ref: dict) -> dict | None:
        """The instancetype a VM's ``spec.instancetype`` names: namespaced when its kind says
        VirtualMachineInstancetype, else cluster-wide (KubeVirt's default). None when it does
        not exist. Raises Transient."""
        name = ref.get("name", "")
        try:
            if (ref.get("kind") or "").lower() == "virtualmachineinstancetype":
                with _errors(f"get instancetype {ns}/{name}"):
                    return self.custom.get_namespaced_custom_object(
                        *INSTANCETYPES,
                        ns,
                        INSTANCETYPE_PLURAL,
                        name,
                        _request_timeout=REQUEST_TIMEOUT,
                    )
            with _errors(f"get cluster instancetype {name}"):
                return self.custom.get_cluster_custom_object(
                    *INSTANCETYPES,
                    CLUSTER_INSTANCETYPE_PLURAL,
                    name,
                    _request_timeout=REQUEST_TIMEOUT,
                )
        except NotFound:
            return None

    # -- PersistentVolumeClaims (disk sizes for the inventory) ---------------------------------

    def get_pvc(self, ns: str, name: str) -> dict | None:
        """GET persistentvolumeclaims/{name}; None when it does not exist. Raises Transient."""
        core = client.CoreV1Api(self.api)
        try:
            with _errors(f"get PVC {ns}/{name}"):
                pvc = core.read_namespaced_persistent_volume_claim(
                    name, ns, _request_timeout=REQUEST_TIMEOUT
                )
        except NotFound:
            return None
        return self.api.sanitize_for_serialization(pvc)

    def list_pvcs(self) -> list[dict]:
        """LIST persistentvolumeclaims in the configured namespaces (all when none), no label
        selector (a VM's disks need not carry its labels). Raises Transient."""
        core = client.CoreV1Api(self.api)
        items: list[dict] = []
        for ns in self.settings.namespaces or ("",):
            token = None
            for _ in range(LIST_PAGES):
                kwargs: dict[str, Any] = {
                    "limit": LIST_PAGE_SIZE,
                    "_request_timeout": REQUEST_TIMEOUT,
                }
                if token:
                    kwargs["_continue"] = token
                with _errors(f"list PVCs in {ns or 'all namespaces'}"):
                    if ns:
                        page = core.list_namespaced_persistent_volume_claim(ns, **kwargs)
                    else:
                        page = core.list_persistent_volume_claim_for_all_namespaces(**kwargs)
                page = self.api.sanitize_for_serialization(page)
                items += page.get("items") or []
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    break
        return items

    # -- Secrets (image credentials for CDI's http source) ----------------------------------

    def apply_secret(self, ns: str, name: str, string_data: dict, labels: dict) -> None:
        """POST a Secret, or PUT it when it exists (credentials may change). Raises Invalid,
        Transient."""
        core = client.CoreV1Api(self.api)
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "type": "Opaque",
            "stringData": string_data,
        }
        _create_or_replace(
            f"Secret {ns}/{name}",
            lambda: core.create_namespaced_secret(ns, body, _request_timeout=REQUEST_TIMEOUT),
            lambda: core.replace_namespaced_secret(
                name, ns, body, _request_timeout=REQUEST_TIMEOUT
            ),
        )

    def delete_secret(self, ns: str, name: str) -> bool:
        """DELETE a Secret; False when it did not exist. Raises Transient."""
        return _found(
            f"delete Secret {ns}/{name}",
            lambda: client.CoreV1Api(self.api).delete_namespaced_secret(
                name, ns, _request_timeout=REQUEST_TIMEOUT
            ),
        )

    # -- ConfigMaps (the CA bundle CDI's importer trusts) ------------------------------------

    def configmap_exists(self, ns: str, name: str) -> bool:
        """GET a ConfigMap; False when it does not exist. Raises Transient."""
        return _found(
            f"get ConfigMap {ns}/{name}",
            lambda: client.CoreV1Api(self.api).read_namespaced_config_map(
                name, ns, _request_timeout=REQUEST_TIMEOUT
            ),
        )

    def apply_configmap(self, ns: str, name: str, data: dict, labels: dict) -> None:
        """POST a ConfigMap, or PUT it when it exists. Raises Invalid, Transient."""
        core = client.CoreV1Api(self.api)
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "data": data,
        }
        _create_or_replace(
            f"ConfigMap {ns}/{name}",
            lambda: core.create_namespaced_config_map(ns, body, _request_timeout=REQUEST_TIMEOUT),
            lambda: core.replace_namespaced_config_map(
                name, ns, body, _request_timeout=REQUEST_TIMEOUT
            ),
        )

    def delete_configmap(self, ns: str, name: str) -> bool:
        """DELETE a ConfigMap; False when it did not exist. Raises Transient."""
        try:
            with _errors(f"delete ConfigMap {ns}/{name}"):
                client.CoreV1Api(self.api).delete_namespaced_config_map(
                    name, ns, _request_timeout=REQUEST_TIMEOUT
                )
            return True
        except NotFound:
            return False

    # -- lists and watches -------------------------------------------------------------------

    def _list_all(self, gv, plural, selector) -> tuple[list[dict], dict[str, str]]:
        items: list[dict] = []
        versions: dict[str, str] = {}
        for ns in self.settings.namespaces or ("",):
            found, rv = self._list_ns(gv, plural, ns, selector)
            items += found
            versions[ns] = rv
        return items, versions

    def _list_ns(self, gv, plural, ns, selector) -> tuple[list[dict], str]:
        items: list[dict] = []
        token = None
        rv = ""
        where = ns or "all namespaces"
        for _ in range(LIST_PAGES):
            kwargs: dict[str, Any] = {"limit": LIST_PAGE_SIZE, "_request_timeout": REQUEST_TIMEOUT}
            if selector:
                kwargs["label_selector"] = selector
            if token:
                kwargs["_continue"] = token
            with _errors(f"list {plural} in {where}"):
                if ns:
                    page = self.custom.list_namespaced_custom_object(*gv, ns, plural, **kwargs)
                else:
                    page = self.custom.list_cluster_custom_object(*gv, plural, **kwargs)
            items += page.get("items", []) or []
            meta = page.get("metadata", {}) or {}
            rv = meta.get("resourceVersion", "") or rv
            token = meta.get("continue")
            if not token:
                break
        return items, rv

    def watch(
        self,
        plural: str,
        ns: str,
        resource_version: str,
        timeout_seconds: int = 30,
        handles: list | None = None,
    ) -> Iterator[dict]:
        """WATCH VMs, VMIs or fleetfish's DataVolumes of one namespace ("" = all) from a
        resourceVersion.

        Yields ``{"type", "object"}`` events (BOOKMARKs included: they carry the newest
        resourceVersion), each decoded once from its JSON line (no client models). Ends when
        the server closes the stream (``timeout_seconds``). Raises Gone (410: relist),
        Transient. The open ``watch.Watch`` is appended to ``handles`` so another thread can
        ``stop()`` it.
        """
        selector = {VM_PLURAL: self.settings.label_selector, DV_PLURAL: MANAGED_DVS}.get(plural, "")
        kwargs: dict[str, Any] = {
            "timeout_seconds": timeout_seconds,
            "allow_watch_bookmarks": True,
            # Read timeout above the server-side timeout: a silent dead stream is noticed.
            "_request_timeout": (5.0, timeout_seconds + 15.0),
        }
        if resource_version:
            kwargs["resource_version"] = resource_version
        if selector:
            kwargs["label_selector"] = selector
        w = RawWatch()
        if handles is not None:
            handles.append(w)
        try:
            with _errors(f"watch {plural} in {ns or 'all namespaces'}"):
                # Each API group spelled out: what the ClusterRole must grant reads off the code.
                if plural == DV_PLURAL and ns:
                    func, args = self.custom.list_namespaced_custom_object, (*CDI, ns, plural)
                elif plural == DV_PLURAL:
                    func, args = self.custom.list_cluster_custom_object, (*CDI, plural)
                elif ns:
                    func, args = self.custom.list_namespaced_custom_object, (*KUBEVIRT, ns, plural)
                else:
                    func, args = self.custom.list_cluster_custom_object, (*KUBEVIRT, plural)
                # With timeout_seconds the client does not retry a 410 itself: it raises it.
                yield from w.stream(func, *args, **kwargs)
        finally:
            if handles is not None and w in handles:
                handles.remove(w)
