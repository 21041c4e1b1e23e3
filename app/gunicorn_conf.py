"""gunicorn settings for the API: ``gunicorn -c app/gunicorn_conf.py`` (env vars as in docs/configuration.md).

Ironic sends ``Connection: close`` on every request, so each call is a fresh TCP (and TLS)
connection and a short read of Redis: sync processes, one request at a time each, serve that
with the least overhead.
Switches and numbers are read as every fleetfish setting is (``fleetfish.settings``): a value
that does not parse stops the server at start, naming the variable.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import socket
import sys

from gunicorn import util
from gunicorn.glogging import Logger
from gunicorn.workers.sync import SyncWorker

from fleetfish.settings import env_number, env_switch

wsgi_app = "app:create_app()"

_host = os.environ.get("FLEETFISH_BIND", "127.0.0.1")
_port = os.environ.get("FLEETFISH_PORT", "8000")
bind = [f"[{_host}]:{_port}" if ":" in _host else f"{_host}:{_port}"]

# One process per core (at least 2, at most 4): more processes than cores only add memory
# (~25-50 MiB each) and CPU contention. Inside a container cpu_count() is the node's, not the
# pod's limit: set FLEETFISH_API_WORKERS to the CPU limit.
workers = env_number(
    os.environ, "FLEETFISH_API_WORKERS", max(2, min(multiprocessing.cpu_count(), 4))
)
# How long a client may take to send its request (and to read the answer) before its connection
# is dropped: a stalled client holds a sync process for this long at most.
read_timeout = env_number(os.environ, "FLEETFISH_API_READ_TIMEOUT", 10.0, float)


_CORK = getattr(socket, "TCP_CORK", None)  # Linux


class TimedSyncWorker(SyncWorker):
    """gunicorn's sync worker, with a deadline on every read and write of a connection.

    The plain sync worker blocks without a deadline: a client that connects and sends nothing
    would hold the process until the arbiter kills it (``timeout``).
    """

    def handle(self, listener, client, addr):
        client.settimeout(read_timeout)
        if _CORK is not None and not self.cfg.is_ssl:
            # The answer's head and body leave in one segment with the FIN that closes the
            # connection, instead of three: gunicorn writes head and body apart, and every
            # write on a socket is a trip through the TCP stack, on loopback the receiver's too.
            # (Not with TLS: the handshake's records must not wait.)
            client.setsockopt(socket.IPPROTO_TCP, _CORK, 1)
        super().handle(listener, client, addr)


# sync (default): a process serves one request at a time, with no thread hand-offs. Ironic
# closes its connection after every request, so keep-alive buys nothing, and requests are short
# (a Redis round trip or two). `python -m bench.api_latency` on 2 cores, Connection: close: sync
# 2450 GETs/s at p99 35 ms, gthread with 2 x 8 threads 1560/s at p99 219 ms (docs/redfish.md).
# gthread (FLEETFISH_API_WORKER_CLASS=gthread, FLEETFISH_API_THREADS per process) keeps more
# requests in flight per process, for many slow clients on a long network path.
_worker_class = os.environ.get("FLEETFISH_API_WORKER_CLASS", "sync")
worker_class = TimedSyncWorker if _worker_class == "sync" else _worker_class
threads = env_number(os.environ, "FLEETFISH_API_THREADS", 8)
timeout = 30
graceful_timeout = 20
keepalive = 2
backlog = 2048

if os.environ.get("FLEETFISH_TLS_CERT") and os.environ.get("FLEETFISH_TLS_KEY"):
    certfile = os.environ["FLEETFISH_TLS_CERT"]
    keyfile = os.environ["FLEETFISH_TLS_KEY"]

# Empty turns the access log off (docs/configuration.md); gunicorn itself refuses "".
accesslog = os.environ.get("FLEETFISH_ACCESS_LOG", "-") or None
errorlog = "-"
loglevel = os.environ.get("FLEETFISH_LOG_LEVEL", "info").lower()


class AccessLogger(Logger):
    """gunicorn's logger, with an access line built from the six fields it prints.

    gunicorn's own access() builds a dict of every request and response header and decodes the
    Basic credentials for each line, and with ``logconfig_dict`` set it logs even when
    ``accesslog`` is off.
    """

    def access(self, resp, req, environ, request_time):
        if accesslog is None:
            return
        status = resp.status.split(None, 1)[0] if isinstance(resp.status, str) else resp.status
        self.access_log.info(
            'fleetfish.api access %s "%s %s %s" %s %s %dms "%s"',
            environ.get("REMOTE_ADDR", "-"),
            environ["REQUEST_METHOD"],
            environ["RAW_URI"],
            environ["SERVER_PROTOCOL"],
            status,
            "-" if getattr(resp, "sent", None) is None else resp.sent,
            request_time.seconds * 1000 + request_time.microseconds // 1000,
            environ.get("HTTP_USER_AGENT", "-"),
        )

    def exception(self, msg, *args, **kwargs):
        # A client that stalls past the read timeout is a fact worth a line, not a traceback.
        if isinstance(sys.exc_info()[1], TimeoutError):
            self.error_log.warning(
                "fleetfish.api dropped a client connection: no complete request or reply within "
                "%g s (FLEETFISH_API_READ_TIMEOUT)",
                read_timeout,
            )
            return
        super().exception(msg, *args, **kwargs)


logger_class = AccessLogger
proc_name = "fleetfish-api"
# gunicorn >= 25 opens a control socket at one fixed per-user path; several API instances on one
# host (lab, tests) would fight over it, and nothing here uses gunicornc.
control_socket_disable = True


_lingering_close = getattr(util, "close_graceful", None)  # gunicorn >= 27


def close_unless_still_sending(sock, timeout: float = 2.0, max_drain: int = 65536) -> None:
    """Close a connection once answered, without waiting for the client to hang up.

    gunicorn >= 27 half-closes, then waits (up to 2 s) for the client's own close, so that
    request bytes the app never read cannot make the kernel reset the connection and cut the
    answer short. sushy sends ``Connection: close`` and hangs up when its thread next gets the
    interpreter, and a sync process takes no other call while it waits: under Ironic's load the
    two processes spent much of their time there (``python -m bench.fleet --sizes 200
    --worker-parent --watcher-in-workers``: the last InsertMedia went out at 6.1-6.5 s with the
    wait, 5.8-6.0 s without). The wait is kept for the case it exists for: request bytes that
    arrived and were left unread (a body refused before it was read) are drained, then the
    lingering close takes over. A body still on its way when nothing has arrived yet is not
    waited for; otherwise the connection closes at once, as gunicorn < 27 always did.
    Installed only where ``close_graceful`` exists (``post_worker_init``).
    """
    try:
        sock.shutdown(socket.SHUT_WR)
        # Non-blocking: a socket with a timeout would first wait for something to read.
        sock.setblocking(False)
        pending = sock.recv(max_drain)
    except (OSError, ValueError):
        pending = b""  # nothing unread and no hang-up yet (the usual case), or already gone
    if pending:
        _lingering_close(sock, timeout, max(0, max_drain - len(pending)))
        return
    try:
        sock.close()
    except OSError:
        pass


def post_worker_init(worker) -> None:
    """Every API process closes answered connections with ``close_unless_still_sending``."""
    if _lingering_close is not None:
        util.close_graceful = close_unless_still_sending


def lean_log_records() -> None:
    """The API's log format (``logconfig_dict``) names no thread or process: logging's
    documented switches spare gathering them for every record (each Ironic call logs a line)."""
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False


lean_log_records()

logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "fleetfish": {"handlers": ["console"], "level": loglevel.upper(), "propagate": False},
        "gunicorn.error": {"handlers": ["console"], "level": loglevel.upper(), "propagate": False},
        "gunicorn.access": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}


# The master imports the app once and forks the workers: they share its pages (about 25 MiB
# less proportional memory per worker; RSS, which counts shared pages in every process, does not
# show it). FLEETFISH_API_PRELOAD=0 restores one import per worker.
preload_app = env_switch(os.environ, "FLEETFISH_API_PRELOAD", True)


def pre_fork(server, worker):
    """Keep the imported objects out of the workers' garbage collection, so it does not write to
    (and un-share) the pages they inherited."""
    import gc

    gc.freeze()


def child_exit(server, worker):
    """Drop the metrics files of a dead worker (prometheus_client multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
