"""``python -m workers.host``: one host's Celery workers and watcher, forked from one parent.

Each worker-side process imports the same code (redis-py, Celery and kombu, the kubernetes
client and its models, the tasks) and, started on its own, keeps a private copy of it. Here the parent
imports that code once and forks every process from it, so they share those pages, as gunicorn's
preload does for the API. The parent restarts a process that dies, and on SIGTERM or SIGINT
passes the signal on (a Celery warm shutdown: running tasks finish or are requeued) and exits
when they are gone.

Where each worker is a container or a pod of its own, nothing can be shared: run ``celery ...
worker`` and ``python -m workers.watcher`` there (docker-compose.yml, k8s/).
"""

from __future__ import annotations

import argparse
import gc
import logging
import multiprocessing
import os
import signal
import sys
import time

from fleetfish.celery_config import MEDIA_QUEUE, POWER_QUEUE

log = logging.getLogger("fleetfish.host")

QUEUES = ",".join((MEDIA_QUEUE, POWER_QUEUE))
# A process that dies this often is not helped by restarting it: the parent stops everything and
# exits non-zero, so that what supervises it (systemd, a container runtime) sees the failure.
RESTARTS_PER_WINDOW = 5
RESTART_WINDOW_SECONDS = 60.0
# Seconds before the 1st, 2nd... restart of a role within the window: a role failing at once
# (its Redis still starting, say) gets about 15 s to recover before the host gives up.
RESTART_BACKOFF = (0.0, 1.0, 2.0, 4.0, 8.0)
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def worker_argv(index: int, concurrency: int, loglevel: str = "INFO", name: str = "") -> list[str]:
    """The ``celery -A workers.celery_app`` arguments of worker ``index`` of a host (node
    ``worker<index>@host``, or ``<name>@host``)."""
    return [
        "worker",
        "--pool",
        "threads",
        "--concurrency",
        str(concurrency),
        "-Q",
        QUEUES,
        "-n",
        f"{name or f'worker{index}'}@%h",
        "--loglevel",
        loglevel,
        "--without-mingle",
    ]


# What a worker or the watcher would otherwise import only once running (found with
# PYTHONPROFILEIMPORTTIME=1 in the children's log), each child for itself.
_PRELOADED = (
    "billiard.pool",
    "celery.app.routes",
    "celery.apps.worker",
    "celery.backends.asynchronous",
    "celery.backends.redis",
    "celery.bin.celery",
    "celery.concurrency.thread",
    "kombu.matcher",
    "kombu.pidbox",
    "kombu.transport.redis",
    "netrc",
    "pydantic._internal._validate_call",
    "workers.consumer",
    "workers.reaper",
    "workers.wake_sweeper",
    "workers.watcher",
)


def preload() -> None:
    """Import everything a worker or the watcher runs, then keep it out of the collector's
    sight: a collection in a child would otherwise write to (and un-share) every inherited
    object's page."""
    import importlib

    from workers.celery_app import app
    from workers.kubevirt import import_client_modules

    for name in _PRELOADED:
        importlib.import_module(name)
    app.loader.import_default_modules()
    import_client_modules()
    gc.collect()
    gc.freeze()


class Host:
    """The parent: forks each role, waits for children, restarts or stops them."""

    def __init__(
        self,
        roles: dict[str, list[str] | None],
        grace: float,
        clock=time.monotonic,
        run_child=None,
        backoff: tuple[float, ...] = RESTART_BACKOFF,
    ):
        # role name -> Celery worker argv, or None for the watcher
        self.roles = roles
        self.run_child = run_child or _run_child  # runs in the child and never returns
        self.grace = grace
        self.clock = clock
        self.backoff = backoff
        self.children: dict[int, str] = {}
        self.deaths: dict[str, list[float]] = {name: [] for name in roles}
        self.restarts: dict[str, float] = {}  # role -> when its restart is due
        self.stopping = False
        self.failed = False
        self.killed = False  # a stop had to SIGKILL a process that outlived the grace
        self.exits: dict[str, int] = {}  # role -> exit status of its last process
        self._pid = os.getpid()
        self._previous_alarm = None

    def spawn(self, name: str) -> int | None:
        """Fork ``name``'s process; None when a stop has begun. Stop signals wait while the
        child is forked and recorded, so the stop that follows reaches it."""
        stopping_signals = {signal.SIGTERM, signal.SIGINT, signal.SIGALRM}
        signal.pthread_sigmask(signal.SIG_BLOCK, stopping_signals)
        try:
            if self.stopping:
                return None
            try:
                pid = os.fork()
            except OSError as exc:  # out of memory or processes: a failed start, retried
                log.error("could not start %s: %s", name, exc)
                self._died(name, f"fork failed: {exc}")
                return None
            if pid == 0:
                try:
                    for signum in stopping_signals:
                        signal.signal(signum, signal.SIG_DFL)
                    _end_with_parent(self._pid)
                    # Log lines name the role (logging's and Celery's formats show processName).
                    multiprocessing.current_process().name = name
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, stopping_signals)
                    self.run_child(name, self.roles[name])
                finally:
                    os._exit(1)  # a runner that returned or raised must not become a parent
            self.children[pid] = name
        finally:
            if os.getpid() == self._pid:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, stopping_signals)
        log.info("started %s pid=%s", name, pid)
        return pid

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Send every child SIGTERM (Celery's warm shutdown) whichever signal stopped the
        parent: a second SIGINT, after the one a terminal's Ctrl-C already gave the children,
        would be Celery's cold shutdown. Those still running after the grace are killed."""
        first = not self.stopping
        self.stopping = True
        if first:
            log.info("stopping %s (signal %s)", ", ".join(self.children.values()), signum)
            self._previous_alarm = signal.signal(signal.SIGALRM, lambda *_: self._kill_the_rest())
            signal.setitimer(signal.ITIMER_REAL, self.grace)
        self._signal_children(signal.SIGTERM)

    def _kill_the_rest(self) -> None:
        if self.children:
            self.killed = True
            log.error(
                "%s still running %.0f s after the stop: killing them",
                ", ".join(self.children.values()),
                self.grace,
            )
        self._signal_children(signal.SIGKILL)

    def _signal_children(self, signum: int) -> None:
        for pid in list(self.children):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def reaped(self, pid: int, status: int) -> None:
        """A child exited: restart its role unless stopping or it keeps dying."""
        name = self.children.pop(pid, None)
        if name is None:
            return
        code = self.exits[name] = os.waitstatus_to_exitcode(status)
        if self.stopping:
            log.info("%s pid=%s exited (%s)", name, pid, code)
            return
        self._died(name, f"pid={pid} exited ({code})")

    def _died(self, name: str, how: str) -> None:
        """Schedule ``name``'s restart after the backoff its recent deaths earned, or stop the
        host when it died more than RESTARTS_PER_WINDOW times in the window."""
        now = self.clock()
        recent = [t for t in self.deaths[name] if now - t < RESTART_WINDOW_SECONDS] + [now]
        self.deaths[name] = recent
        if len(recent) > RESTARTS_PER_WINDOW:
            log.error(
                "%s died %d times within %.0f s (last: %s): stopping this host's workers",
                name,
                len(recent),
                RESTART_WINDOW_SECONDS,
                how,
            )
            self.failed = True
            self.stop()
            return
        delay = self.backoff[min(len(recent), len(self.backoff)) - 1]
        log.warning("%s %s: starting it again in %.0f s", name, how, delay)
        self.restarts[name] = now + delay

    def _start_due(self) -> float | None:
        """Start the roles whose restart is due; seconds until the next one (None: none)."""
        if self.stopping:
            self.restarts.clear()
            return None
        now = self.clock()
        for name, due in sorted(self.restarts.items(), key=lambda item: item[1]):
            if due <= now:
                del self.restarts[name]
                self.spawn(name)
        if not self.restarts:
            return None
        return max(0.0, min(self.restarts.values()) - self.clock())

    def run(self) -> int:
        for name in self.roles:
            self.spawn(name)
        return self.wait()

    def wait(self) -> int:
        """Reap children until none is left or due; 0, or 1 when a role kept dying or a stop
        had to kill a process."""
        while True:
            until_restart = self._start_due()
            if not self.children and until_restart is None:
                break
            try:
                # Blocking unless a restart is due: then poll until its time.
                pid, status = os.waitpid(-1, 0 if until_restart is None else os.WNOHANG)
            except ChildProcessError:
                if until_restart is None:
                    break
                pid = 0
            if pid:
                self.reaped(pid, status)
            elif until_restart is not None:
                time.sleep(min(until_restart, 0.1))
        if self._previous_alarm is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous_alarm)
        return 1 if self.failed or self.killed else 0


def _end_with_parent(parent_pid: int) -> None:
    """In a child: have the kernel send SIGTERM (a warm shutdown) when the parent dies, even
    by SIGKILL, so no worker runs on unsupervised; exit now if it died already."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the children outlive a killed parent
        return
    if os.getppid() != parent_pid:
        os._exit(1)


def _run_child(name: str, argv: list[str] | None) -> None:
    code = 1
    try:
        if argv is None:
            from workers.watcher import main as watcher_main

            code = watcher_main([])
        else:
            from workers.celery_app import app

            # app.start, not app.worker_main: it returns the worker's exit status.
            code = app.start(argv) or 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        logging.getLogger("fleetfish.host").exception("%s failed", name)
    finally:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # the parent's cleanup (atexit, open files) is not this process's


def host_roles(args: argparse.Namespace, conf) -> dict[str, list[str] | None]:
    """Role name -> Celery worker argv, or None for the watcher process."""
    roles: dict[str, list[str] | None] = {
        f"worker{i}": worker_argv(i, args.concurrency, conf.log_level) for i in range(args.workers)
    }
    # Workers that run the watcher as a thread (FLEETFISH_WORKER_WATCH=1) need no process of it.
    if not (args.no_watcher or conf.worker_watch):
        roles["watcher"] = None
    return roles


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workers.host", description=__doc__)
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--concurrency", type=int, default=16, help="threads per worker")
    parser.add_argument(
        "--no-watcher",
        action="store_true",
        help="no watcher process (a watcher runs elsewhere); none either when the workers run "
        "it as a thread (FLEETFISH_WORKER_WATCH=1)",
    )
    parser.add_argument(
        "--grace", type=float, default=30.0, help="seconds a stop waits before killing"
    )
    args = parser.parse_args(argv)
    if args.workers < 1 or args.concurrency < 1:
        parser.error("--workers and --concurrency must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from fleetfish.settings import Settings

    conf = Settings.from_env()
    level = conf.log_level
    multiprocessing.current_process().name = "host"
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    preload()
    roles = host_roles(args, conf)
    host = Host(roles, args.grace)
    signal.signal(signal.SIGTERM, lambda signum, _frame: host.stop(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: host.stop(signum))
    log.info("host parent pid=%s: %s", os.getpid(), ", ".join(roles))
    return host.run()


if __name__ == "__main__":
    sys.exit(main())
