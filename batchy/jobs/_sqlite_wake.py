"""The SQLite store's wake-ups: the queues a step must wake, and an idle worker's next due time.

Workers of one file wait on :class:`_wake.Wakeups` with bells in ``<file>-wake``
(a named pipe per queue, for the other processes), except for an in-memory
database, which no other process can open.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Sequence

from ._model import Outcome
from ._sqlite_lock import read
from ._wake import Wakeups

__all__ = ["SQLiteWakeups"]


class SQLiteWakeups(Wakeups):
    """:class:`Wakeups` that read the store's rows through its connection."""

    def __init__(
        self, path: str, db: sqlite3.Connection, lock: threading.RLock, busy_timeout: float
    ) -> None:
        super().__init__(None if path in ("", ":memory:") else path + "-wake")
        self.db = db
        self.lock = lock
        self.busy_timeout = busy_timeout

    def after_cycle(
        self, outcomes: Sequence[Outcome], queues: Sequence[str], full: bool, now: float
    ) -> set[str]:
        """The queues to wake once the cycle's transaction commits (call it inside).

        Retries set new due times; ready rows left where the cycle did not drain
        (it was ``full``, or they are not its queues) need another worker.
        """
        touched = {o.queue for o in outcomes if o.queue}
        unsure = touched | set(queues) if full else touched - set(queues)
        sql = "SELECT 1 FROM jobs WHERE queue = ? AND state = 0 AND due <= ? LIMIT 1"
        left = {q for q in unsure if self.db.execute(sql, (q, now)).fetchone()}
        return left | {o.queue for o in outcomes if o.kind == "retry"}

    async def wait_for_work(self, queues: Iterable[str], timeout: float) -> None:
        """Until a wake-up, the next due time or lease expiry (index lookups), or timeout.

        A lease that runs out gives its job back (its worker died or stalled):
        nobody rings for that, so the first idle worker wakes at that moment.
        """
        names = list(queues)
        sql = "SELECT min(due) FROM jobs WHERE queue = ? AND state = 0"

        def next_times() -> list[float]:
            dues = [d for q in names if (d := self.db.execute(sql, (q,)).fetchone()[0]) is not None]
            lease = self.db.execute("SELECT min(lease) FROM jobs WHERE state = 1").fetchone()[0]
            return dues if lease is None else [*dues, lease]

        dues = await read(self.lock, self.busy_timeout, next_times)
        await self.wait(names, timeout, min(dues, default=None))
