"""The worker's Celery consumer, surviving a Redis restart (Celery/kombu 5.7 crash on reconnect).

Gossip is off whatever the command line says: it serves worker elections and a view of the
other workers' heartbeats, neither of which fleetfish uses, and after a Redis outage Celery
5.7 fails to restart it (an AttributeError traceback at ERROR in every worker's log).

On a lost broker connection Celery 5.7 first ``collect()``s the kombu connection (which drops
its transport's client) and then ``close()``s it; closing the Redis channel tries to restore
the unacked messages through that dropped client and raises AttributeError, which Celery
treats as unrecoverable: every worker exits when Redis restarts. The unacked messages are
still in Redis and come back through the visibility-timeout sweep, so that restore can be
skipped; the consumer then reconnects as designed.
"""

from __future__ import annotations

import logging

from celery.worker.consumer import Consumer as CeleryConsumer

log = logging.getLogger("fleetfish.worker")


class Consumer(CeleryConsumer):
    def __init__(self, *args, worker_options=None, **kwargs):
        options = dict(worker_options or {}, without_gossip=True)
        super().__init__(*args, worker_options=options, **kwargs)

    def on_connection_error_after_connected(self, exc: Exception) -> None:
        try:
            super().on_connection_error_after_connected(exc)
        except AttributeError as err:
            # Raised by the close of the already-collected connection, after Celery set
            # self.connection to None: nothing is left to clean up.
            log.warning("broker connection lost (%s); closing it failed: %r", exc, err)
