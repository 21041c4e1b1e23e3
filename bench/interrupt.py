"""SIGTERM ends a lab-starting tool (a benchmark, the soak) the way Ctrl-C does.

A timeout or a cancelled job sends SIGTERM, whose default action ends the process at once: the
``finally`` that stops the lab it started never runs and the lab's processes live on. As
KeyboardInterrupt it unwinds through that ``finally`` instead.

Kept in bench/, not lab/: ``bench.compare`` runs this bench/ on a reference commit's lab/.
"""

from __future__ import annotations

import signal


def stop_on_sigterm() -> None:
    """From now on SIGTERM raises KeyboardInterrupt in the main thread."""

    def interrupt(_signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
