"""The simulator as one object: store, controllers, HTTP server, and the /lab endpoints."""

from __future__ import annotations

import logging
import threading
import time

from lab.kubesim import errors, finalizers
from lab.kubesim.api import ResourceApi
from lab.kubesim.boot import BootLog
from lab.kubesim.cdi import Cdi, CdiTimings
from lab.kubesim.controller import Controller, Timings
from lab.kubesim.faults import Faults, RequestCounts, RequestLog
from lab.kubesim.kinds import DV, VM, VMI
from lab.kubesim.seed import seed
from lab.kubesim.server import LabHTTPServer
from lab.kubesim.store import ObjectStore
from lab.kubesim.subresources import Subresources

log = logging.getLogger(__name__)


class Simulator:
    """``Simulator(vms=3).start()`` serves on ``.url`` from a background thread; ``.stop()`` ends it."""

    def __init__(
        self,
        port: int = 0,
        bind: str = "127.0.0.1",
        vms: int = 0,
        namespace: str = "fleetfish-lab",
        import_seconds: float = 5.0,
        iso_base: str = "",
        immediate_binding: bool = False,
        timings: Timings | None = None,
        cdi_timings: CdiTimings | None = None,
        history: int = 20000,
    ):
        self.bind = bind
        self.port = port
        self.namespace = namespace
        self.iso_base = iso_base
        self.vm_count = vms
        self.store = ObjectStore(history=history)
        self.boots = BootLog()
        self.faults = Faults()
        self.requests = RequestLog()
        self.counts = RequestCounts()
        self.controller = Controller(self.store, self.boots, timings)
        cdi_timings = cdi_timings or CdiTimings(import_seconds=import_seconds)
        self.cdi = Cdi(self.store, cdi_timings, immediate_binding=immediate_binding)
        self.controller.reconcilers.append(self.cdi.reconcile)
        self.controller.reconcilers.append(
            lambda _now: finalizers.collect_garbage(self.store, self.controller.claims_in_use)
        )
        self.controller.digests = self.cdi.digest
        self.api = ResourceApi(self.store)
        self.api.on_creating.append(finalizers.add_defaults)
        self.api.on_created.append(self.cdi.on_created)
        self.api.on_deleted.append(self.cdi.on_deleted)
        self.subresources = Subresources(self.store, self.controller)
        self._server: LabHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.bind}:{self.port}"

    def start(self) -> Simulator:
        seed(self.store, self.namespace, self.vm_count)
        self.controller.tick()  # seeded VMs show a consistent status from the first read
        self._server = LabHTTPServer((self.bind, self.port), self)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="kubesim-http",
            daemon=True,
        )
        self._thread.start()
        self.controller.start()
        return self

    def stop(self) -> None:
        self.store.stop()
        self.controller.stop()
        self.cdi.stop()
        if self._server is not None:
            self._server.shutdown()
            self._server.close_connections()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- /lab --------------------------------------------------------------------------------

    def lab_route(
        self, method: str, path: str, query: dict, body: dict, handler
    ) -> tuple[int, dict]:
        since = float(query["since"]) if query.get("since") else None
        if path == "/lab/healthz" and method == "GET":
            return 200, {"status": "ok", "resourceVersion": str(self.store.rv)}
        if path == "/lab/boots" and method == "GET":
            return 200, {"boots": self.boots.query(query.get("vm"), since)}
        if path == "/lab/requests" and method == "GET":
            return 200, {"requests": self.requests.since(since)}
        if path == "/lab/requests/counts" and method == "GET":
            rows = self.counts.rows()
            return 200, {"counts": rows, "total": sum(r["count"] for r in rows)}
        if path == "/lab/faults":
            if method == "POST":
                return 201, {"fault": self.faults.add(body)}
            if method == "DELETE":
                self.faults.clear()
                return 200, {"faults": []}
            if method == "GET":
                return 200, {"faults": self.faults.list()}
        if path == "/lab/watches/drop" and method == "POST":
            handler.server.abrupt_drop = bool(body.get("abrupt"))
            self.store.drop_watches()
            return 200, {"dropped": True, "abrupt": handler.server.abrupt_drop}
        if path == "/lab/compact" and method == "POST":
            return 200, {"compactedResourceVersion": str(self.store.compact())}
        if path == "/lab/status" and method == "GET":
            return 200, self.summary()
        raise errors.ApiError(404, f"no lab endpoint {method} {path}", "NotFound")

    def summary(self) -> dict:
        with self.store.cond:
            vms = {
                vm["metadata"]["name"]: (vm.get("status") or {}).get("printableStatus")
                for vm in self.store.peek_all(VM)
            }
            dvs = {
                dv["metadata"]["name"]: (dv.get("status") or {}).get("phase")
                for dv in self.store.peek_all(DV)
            }
            vmis = len(self.store.peek_all(VMI))
        return {
            "time": time.time(),
            "namespace": self.namespace,
            "iso_base": self.iso_base,
            "resourceVersion": str(self.store.rv),
            "vms": vms,
            "vmis": vmis,
            "datavolumes": dvs,
        }
