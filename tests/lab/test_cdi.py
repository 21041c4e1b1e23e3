"""CDI imports: real downloads from the ISO server, progress, transient retries, fatal checksum."""

from __future__ import annotations

from kubernetes.client.rest import ApiException

from tests.lab.kube import NS, wait_until


def _cond(dv: dict, type_: str) -> dict:
    return next(c for c in dv["status"]["conditions"] if c["type"] == type_)


def test_import_reports_progress_then_succeeds_with_a_bound_pvc(k8s, iso):
    url = iso.image_url("rhcos/live.iso")
    before = iso.hits("rhcos/live.iso")
    k8s.create_dv("live", url)
    phases, progress = [], []

    def done():
        status = k8s.dv("live").get("status") or {}
        if status.get("phase") and (not phases or phases[-1] != status["phase"]):
            phases.append(status["phase"])
        if status.get("progress") and (not progress or progress[-1] != status["progress"]):
            progress.append(status["progress"])
        return status.get("phase") == "Succeeded"

    wait_until(done, timeout=10, interval=0.02, what="import Succeeded")
    assert phases[-2:] == ["ImportInProgress", "Succeeded"]
    assert progress[0] == "N/A" and progress[-1] == "100.0%"
    middle = [p for p in progress[1:-1]]
    assert middle and all(p.endswith("%") and 0 < float(p[:-1]) < 100 for p in middle)
    dv = k8s.dv("live")
    assert _cond(dv, "Ready")["status"] == "True" and _cond(dv, "Bound")["status"] == "True"
    assert dv["status"]["restartCount"] == 0
    pvc = k8s.core.read_namespaced_persistent_volume_claim("live", NS)
    assert pvc.status.phase == "Bound" and pvc.metadata.owner_references[0].kind == "DataVolume"
    assert iso.hits("rhcos/live.iso") == before + 1  # it really downloaded the image


def test_missing_image_retries_like_an_importer_pod(k8s, iso):
    k8s.create_dv("gone", iso.image_url("missing/deleted.iso"))

    def restarted_twice():
        status = k8s.dv("gone").get("status") or {}
        return status.get("restartCount", 0) >= 2 and status

    status = wait_until(restarted_twice, timeout=10, what="two importer restarts")
    assert status["phase"] == "ImportInProgress"
    running = _cond(k8s.dv("gone"), "Running")
    assert (running["status"], running["reason"]) == ("False", "Error")
    assert running["message"] == (
        "Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found"
    )


def test_connection_refused_is_transient_too(k8s):
    from lab.ports import free_port

    k8s.create_dv("nowhere", f"http://127.0.0.1:{free_port()}/x.iso")
    wait_until(
        lambda: (k8s.dv("nowhere").get("status") or {}).get("restartCount", 0) >= 1,
        what="a restart",
    )
    assert "connection refused" in _cond(k8s.dv("nowhere"), "Running")["message"]


def test_checksum_mismatch_is_fatal_and_a_match_succeeds(k8s, iso):
    k8s.create_dv("bad-sum", iso.image_url("a.iso"), checksum="sha256:" + "0" * 64)
    k8s.create_dv("good-sum", iso.image_url("a.iso"), checksum="sha256:" + iso.sha256("a.iso"))
    wait_until(
        lambda: (k8s.dv("bad-sum").get("status") or {}).get("phase") == "Failed", what="Failed"
    )
    assert "checksum mismatch" in _cond(k8s.dv("bad-sum"), "Running")["message"]
    wait_until(
        lambda: (k8s.dv("good-sum").get("status") or {}).get("phase") == "Succeeded",
        what="Succeeded",
    )


def test_too_small_a_pvc_keeps_failing(k8s, iso):
    k8s.create_dv("tight", iso.image_url("b.iso"), storage="1Mi")  # the image is exactly 1 MiB
    wait_until(
        lambda: (k8s.dv("tight").get("status") or {}).get("restartCount", 0) >= 1, what="a restart"
    )
    assert "A larger PVC is required" in _cond(k8s.dv("tight"), "Running")["message"]


def test_without_immediate_binding_the_import_waits_for_a_consumer(k8s, iso):
    k8s.create_dv("lazy", iso.image_url("c.iso"), immediate=False)
    wait_until(
        lambda: (k8s.dv("lazy").get("status") or {}).get("phase") == "WaitForFirstConsumer",
        what="WFFC",
    )
    assert k8s.core.read_namespaced_persistent_volume_claim("lazy", NS).status.phase == "Pending"


def test_deleting_a_datavolume_deletes_its_pvc(k8s, iso):
    k8s.create_dv("short-lived", iso.image_url("d.iso"))
    wait_until(
        lambda: (k8s.dv("short-lived").get("status") or {}).get("phase") == "ImportInProgress",
        what="import",
    )
    k8s.custom.delete_namespaced_custom_object(
        "cdi.kubevirt.io", "v1beta1", NS, "datavolumes", "short-lived"
    )

    def pvc_gone():
        try:
            k8s.core.read_namespaced_persistent_volume_claim("short-lived", NS)
            return False
        except ApiException as exc:
            return exc.status == 404

    wait_until(pvc_gone, what="the PVC to go")


def test_secret_string_data_is_stored_as_base64_data(k8s):
    k8s.core.create_namespaced_secret(
        NS, {"metadata": {"name": "creds"}, "stringData": {"accessKeyId": "user"}}
    )
    stored = k8s.core.read_namespaced_secret("creds", NS)
    assert stored.data == {"accessKeyId": "dXNlcg=="} and stored.string_data is None


def test_an_importer_waits_for_its_secret_and_ca_configmap(k8s, iso):
    k8s.create_dv(
        "waits", iso.image_url("w.iso"), secretRef="creds-later", certConfigMap="ca-later"
    )
    wait_until(
        lambda: 'secret "creds-later" not found' in _cond(k8s.dv("waits"), "Running")["message"],
        timeout=5,
        what="importer pod waiting for its Secret",
    )
    assert k8s.dv("waits")["status"].get("restartCount", 0) == 0
    k8s.core.create_namespaced_secret(NS, {"metadata": {"name": "creds-later"}, "data": {}})
    wait_until(
        lambda: 'configmap "ca-later" not found' in _cond(k8s.dv("waits"), "Running")["message"],
        timeout=10,
        what="importer pod waiting for its CA ConfigMap",
    )
    k8s.core.create_namespaced_config_map(NS, {"metadata": {"name": "ca-later"}, "data": {}})
    wait_until(
        lambda: k8s.dv("waits")["status"].get("phase") == "Succeeded",
        timeout=20,
        what="import after both appeared",
    )
