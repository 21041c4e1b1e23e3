"""The worker side's errors, by what a task does about them: retry, or end its Redfish task.

- ``Transient``: try again later (the cluster answered 5xx/429 or not at all, a short Redis
  lock was busy). Retried with bounded backoff (``workers.taskutil.retry_transient``); when
  the retries run out the Redfish task ends in Exception. ``Waiting`` (a change the cluster is
  still making) is looked at again every few seconds instead, up to the power-on timeout.
- ``RequestError``: the request cannot be done as asked (a ResetType the VM cannot take in its
  state, a VM without the disk to boot from). Exception, no retry.
- ``Refused``: the cluster said no (404, 409, a webhook rejection, an import that failed).
  Exception, no retry.
- ``Stale``: the state the work was based on is outdated (a newer request, a watch too old).

``workers.kubevirt`` maps every Kubernetes answer onto these; ``task_failure`` maps them onto
the Redfish task's fields.
"""

from __future__ import annotations


class WorkError(Exception):
    """Base of every error a task expects; ``message`` is what the Redfish task shows."""

    def __init__(self, message: str = ""):
        super().__init__(message)
        self.message = message


class Transient(WorkError):
    """Try again later: retried with backoff."""


class Waiting(Transient):
    """The cluster is in the middle of a change that ends by itself (the VM's last run is still
    shutting down): look again shortly. Not a failure, so it uses no retry; bounded by the
    power-on timeout."""


class RequestError(WorkError):
    """The request itself cannot be done; retrying cannot help."""


class Refused(WorkError):
    """The cluster refused the call; retrying cannot help."""


class Stale(WorkError):
    """The work was based on state that has changed since."""


# What a task body catches to end its Redfish task: ours, plus the ValueError the pure logic
# (boot order planning, cdrom volumes) raises for a VM it cannot plan for (a RequestError).
FAILURES = (WorkError, ValueError)


def task_failure(exc: BaseException) -> dict[str, str]:
    """The Redfish task fields (``Store.update_task``) of a task that ends on ``exc``."""
    message = str(exc) or type(exc).__name__
    if isinstance(exc, Stale):
        return {"state": "Cancelled", "status": "Warning", "message": message}
    return {"state": "Exception", "status": "Critical", "message": message}
