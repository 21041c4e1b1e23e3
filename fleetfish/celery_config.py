"""Celery settings shared by the API (which only sends tasks by name) and the worker fleet."""

from __future__ import annotations

from fleetfish.redis_transport import TRANSPORT
from fleetfish.settings import Settings

MEDIA_QUEUE = "fleetfish.media"
POWER_QUEUE = "fleetfish.power"

# Routing by name, so the API can send tasks without importing worker code.
TASK_ROUTES = {
    # The chord body powers the node on once its media is attached: it must not wait behind
    # the media queue's backlog of imports and attaches of other nodes. Workers pop their
    # queues in turn, so a power-on waits for at most about one media task per free slot.
    "media.release": {"queue": POWER_QUEUE},
    "media.*": {"queue": MEDIA_QUEUE},
    "power.*": {"queue": POWER_QUEUE},
    "boot.*": {"queue": POWER_QUEUE},
}


def celery_config(settings: Settings) -> dict:
    conf = _celery_config(settings)
    if settings.redis_url.startswith("redis://"):
        # Plain Redis only: rediss:// (TLS), sentinel and unix sockets keep kombu's own
        # transport, whose URL handling sets them up.
        conf["broker_transport"] = TRANSPORT
    return conf


def _celery_config(settings: Settings) -> dict:
    return {
        "broker_url": settings.redis_url,
        "result_backend": settings.redis_url,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_routes": TASK_ROUTES,
        "task_default_queue": MEDIA_QUEUE,
        # Results are kept for the chord's member (media.attach, which carries the chord in its
        # message): a global ignore_result breaks chords. Every other task stores none
        # (``ignore_result`` on each, so no RETRY result per import look either): nobody reads
        # them, the Redfish tasks and the event log are the record, and a failed media.import
        # still reaches the chord's errback through the chain it carries. Stored results carry
        # no arguments or names (result_extended): nothing reads those either.
        "task_ignore_result": False,
        "result_expires": settings.task_result_ttl,
        "result_extended": False,
        # Idempotent tasks, acknowledged after they ran; a killed child requeues its task.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        # Every task is short (one API round trip or one poll), far below the visibility timeout,
        # and so are retry countdowns; a task of a SIGKILLed worker comes back after it.
        # kombu sweeps the unacked set only every interval x throttle seconds (100 s by
        # default): sweep a few times per visibility timeout so a killed worker's task returns
        # soon after it expires.
        # The sweep runs under a Redis lock that kombu keeps for 300 s by default: a worker
        # SIGKILLed mid-sweep held back every redelivery for up to 5 minutes. A sweep takes
        # milliseconds, and each message is restored in a WATCH transaction that a concurrent
        # sweep cannot repeat, so the lock only needs to outlive one sweep.
        "broker_transport_options": {
            "visibility_timeout": settings.visibility_timeout,
            "unacked_restore_interval": max(1, settings.visibility_timeout // 5),
            "unacked_restore_throttle": 1,
            "unacked_mutex_expire": max(1, settings.visibility_timeout // 5),
        },
        "result_backend_transport_options": {"retry_policy": {"timeout": 5.0}},
        "broker_connection_retry_on_startup": True,
        # Task events (received, started, succeeded: three Redis PUBLISHes per task) only when
        # something listens: Flower asks every worker for them every 5 s (its enable_events
        # option, on by default) and they stay on from then. Sent to nobody they took about a
        # sixth of the workers' CPU (python -m bench.fleet, N = 200).
        "worker_send_task_events": settings.task_events,
        # No "task-sent" event per message the API sends (a Redis PUBLISH and 0.2-0.4 ms of the
        # API's CPU per call, python -m bench.api_memory): Flower lists a task from the worker's
        # received event, milliseconds later, and shows queue lengths from the broker.
        "task_send_sent_event": False,
        # No STARTED result per run: Flower shows a started task from the worker's events, and
        # an import look would write one every time it runs.
        "task_track_started": False,
        "worker_hijack_root_logger": False,
        "enable_utc": True,
    }
