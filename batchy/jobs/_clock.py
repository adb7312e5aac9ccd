"""The two clocks of the job system: the caller's (workers, queues) and the store's.

Ownership and due-ness are decided on the *store's* clock only: a lease runs
out, a delayed job falls due, a unique key expires when the store's clock says
so. Redis reads its own ``TIME`` inside every script; the stores on one machine
(memory, SQLite) read :func:`store_now`. The caller's clock (:func:`now`: a
worker's, an enqueuing process's) never decides anything: the absolute times it
hands a store (a delay's due time, a retry's due time) are turned into offsets
from the moment it sent them (:func:`on_store`), so a machine whose clock is
ten seconds off changes nothing.

Everything in :mod:`batchy.jobs` reads the caller's clock through :func:`now`
(looked up on this module at each call), so a test can shift one function to
play a machine with a wrong clock.
"""

from __future__ import annotations

import time

__all__ = ["now", "on_store", "store_now"]


def now() -> float:
    """The caller's wall clock (Unix seconds): what workers and enqueuing code read."""
    return time.time()


def store_now() -> float:
    """The clock of the stores that live on this machine (memory, SQLite)."""
    return time.time()


def on_store(due: float | None, sent: float, store: float) -> float:
    """``due`` (on the caller's clock, which read ``sent``) on the store's clock (at ``store``).

    ``None`` is "now". Only the offset ``due - sent`` crosses from one clock to
    the other, so a skewed caller still means "in 5 seconds" when it says so.
    """
    return store if due is None else store + (due - sent)
