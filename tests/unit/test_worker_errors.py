"""One worker-side error hierarchy: each Kubernetes answer, lock timeout and task failure has
one kind, and the kind alone decides the retry and the Redfish task's end state."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from tasks.media.tasks import MediaError
from tasks.power.reset import PowerError
from workers import errors
from workers.kubevirt import KubeError, map_api_exception
from workers.taskutil import Busy


def api_error(status: int, reason: str = "") -> KubeError:
    exc = ApiException(status=status, reason="x")
    exc.body = json.dumps({"kind": "Status", "message": "m", "reason": reason})
    return map_api_exception(exc, "call")


@pytest.mark.parametrize(
    ("status", "reason", "kind"),
    [
        (0, "", errors.Transient),
        (429, "", errors.Transient),
        (500, "", errors.Transient),
        (503, "", errors.Transient),
        (404, "NotFound", errors.Refused),
        (409, "Conflict", errors.Refused),
        (409, "AlreadyExists", errors.Refused),
        (400, "BadRequest", errors.Refused),
        (403, "Forbidden", errors.Refused),
        (422, "Invalid", errors.Refused),
        (410, "Expired", errors.Stale),
    ],
)
def test_each_kubernetes_answer_has_one_kind(status, reason, kind):
    exc = api_error(status, reason)
    kinds = (errors.Transient, errors.Refused, errors.Stale, errors.RequestError)
    assert [k for k in kinds if isinstance(exc, k)] == [kind]


def test_a_busy_lock_is_transient_but_not_a_kubernetes_error():
    busy = Busy("media of ns.vm Cd is busy")
    assert isinstance(busy, errors.Transient)
    assert not isinstance(busy, KubeError)


def test_task_errors_belong_to_the_hierarchy():
    assert isinstance(PowerError("ResetType Nmi is not supported"), errors.RequestError)
    assert isinstance(MediaError("import failed"), errors.Refused)
    assert issubclass(ValueError, errors.FAILURES)


def test_failures_end_the_redfish_task_in_exception_and_stale_work_cancelled():
    for exc in (api_error(404), api_error(500), PowerError("no VM"), ValueError("no cdrom")):
        fields = errors.task_failure(exc)
        assert (fields["state"], fields["status"]) == ("Exception", "Critical")
        assert fields["message"] == str(exc)
    assert errors.task_failure(api_error(410))["state"] == "Cancelled"
    assert errors.task_failure(errors.Transient())["message"] == "Transient"
