"""The SQLite store's activity counters and sharded-run records, as the store's methods.

Split from :mod:`._sqlite` (which keeps jobs) so that module stays readable: these
are plain reads and writes of the ``counts`` and ``runs`` tables.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from ._sqlite_counts import add_counts, read_counts
from ._sqlite_runs import note_run, run_started, runs

if TYPE_CHECKING:
    from ._sqlite_lock import Transaction

__all__ = ["KeptRecords"]

T = TypeVar("T")


class KeptRecords:
    """Methods of :class:`~batchy.jobs.SQLiteBackend` over its counters and runs."""

    _db: sqlite3.Connection

    if TYPE_CHECKING:

        def _tx(self) -> Transaction: ...
        def _read(self, fn: Callable[[], T]) -> Awaitable[T]: ...

    async def add_counts(self, counts: Mapping[tuple[int, str], int], now: float) -> None:
        async with self._tx():
            add_counts(self._db, counts, now)

    async def read_counts(self, since: int, now: float) -> dict[tuple[int, str], int]:
        return await self._read(lambda: read_counts(self._db, since))

    async def note_run(self, name: str, run: str, now: float, keep: float) -> None:
        async with self._tx():
            note_run(self._db, name, run, now, keep)

    async def runs(
        self, name: str, now: float, keep: float, limit: int = 50
    ) -> list[tuple[str, float]]:
        return await self._read(lambda: runs(self._db, name, now, keep, limit))

    async def run_started(self, name: str, run: str) -> float | None:
        return await self._read(lambda: run_started(self._db, name, run))
