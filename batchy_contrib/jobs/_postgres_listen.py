"""The PostgreSQL job store's wake-ups: one ``LISTEN`` connection per process, for its workers.

Every step that makes a job ready in a queue, or sets a new due time, calls
``pg_notify`` in its transaction, so the notification is sent when (and only
if) the step commits: ``'1<queue>'`` (jobs are ready) or ``'d<queue>'`` (also a
new due time). A :class:`Listener` holds one connection that listens on the
schema's channel and hands each notification to one waiting worker of the
queue in this process; when none waits, the queue is remembered as *pending*
and the next worker to wait on it returns at once, so a wake-up is never lost
between a worker's cycle and its next wait. A worker whose cycle had no room for
every ready job passes the wake-up on in the same way (:meth:`Listener.pass_on`).

A lost connection (a restart, ``pg_terminate_backend``, a network cut) loses
the notifications sent while it was down. The listener connects again (backing
off up to a second between tries) and then wakes every waiting worker and
marks every queue pending: each worker looks at the store once, which catches
up on whatever was missed. A health check every ``check_every`` seconds finds a
connection that died without a word.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

import psycopg

__all__ = ["Listener"]

log = logging.getLogger("batchy.jobs")

#: Every queue, for the catch-up after a reconnect.
ALL = "*"
#: Seconds a notification sent by this process's own connections waits before it
#: wakes this process's workers.
OWN_DELAY = 0.002


class Listener:
    """``LISTEN`` on ``channel`` for this process; :meth:`wait` until a queue has news."""

    def __init__(
        self,
        connect: Callable[[], object],
        channel: str,
        *,
        check_every: float = 30.0,
    ) -> None:
        self._connect = connect  # returns an awaitable of an autocommit AsyncConnection
        self.channel = channel
        self.check_every = check_every
        self.pending: set[str] = set()
        self._waiters: list[tuple[frozenset[str], asyncio.Future[str]]] = []
        #: Bumped by every 'd' notification and every reconnect: a worker's cached
        #: next due time read before it may be wrong.
        self.epoch = 0
        self.connection: psycopg.AsyncConnection[object] | None = None
        self.ready = asyncio.Event()
        self.reconnects = 0
        self.ever = False  # listened at least once
        #: Server process ids of this process's pool connections (see ``_pump``).
        self.own: set[int] = set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _listen(self) -> psycopg.AsyncConnection[object]:
        conn: psycopg.AsyncConnection[object] = await self._connect()  # type: ignore[misc]
        ident = '"' + self.channel.replace('"', '""') + '"'
        await conn.execute("LISTEN " + ident)
        return conn

    async def _run(self) -> None:
        delay = 0.05
        failed = 0  # tries in a row that could not connect
        while True:
            try:
                self.connection = await self._listen()
            except (psycopg.Error, OSError) as error:
                # Once per outage, not once a second: the worker says the store is
                # down already, and says when it is back.
                failed += 1
                level = logging.WARNING if failed == 1 else logging.DEBUG
                log.log(level, "batchy jobs: cannot LISTEN on PostgreSQL (%s); retrying", error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            if failed > 1:
                log.info("batchy jobs: listening on PostgreSQL again after %d tries", failed)
            delay, failed = 0.05, 0
            if self.ever:
                # Listening again: whatever was sent while the connection was down
                # is caught up by one look at the store from every worker. (The
                # first connection needs none: workers cycle only once it listens.)
                self._deliver(ALL, True)
            self.ever = True
            self.ready.set()
            try:
                await self._pump(self.connection)
            except (psycopg.Error, OSError) as error:
                self.reconnects += 1
                log.warning(
                    "batchy jobs: the PostgreSQL LISTEN connection was lost (%s); "
                    "connecting again, then every worker looks at the store once",
                    error,
                )
            finally:
                self.ready.clear()
                with contextlib.suppress(Exception):
                    await self.connection.close()
                self.connection = None

    async def _pump(self, conn: psycopg.AsyncConnection[object]) -> None:
        while True:
            async for note in conn.notifies(timeout=self.check_every):
                kind, queue = note.payload[:1], note.payload[1:]
                if note.pid in self.own:
                    # Sent by a step of this process, whose caller is about to act
                    # on what it did (claim a job it just released, read a row it
                    # wrote): it goes first, then this process's idle workers.
                    asyncio.get_running_loop().call_later(
                        OWN_DELAY, self._deliver, queue, kind == "d"
                    )
                else:
                    self._deliver(queue, due=kind == "d")
            await conn.execute("SELECT 1")  # a connection that died silently raises here

    def pass_on(self, queues: Iterable[str]) -> None:
        """A cycle of this process had no room for every ready job of ``queues``: their
        wake-up goes on to another worker of this process (or waits for the next).

        Other processes need none: each heard the NOTIFY that made the jobs ready.
        It waits as a notification from this process's own connections does.
        """
        loop = asyncio.get_running_loop()
        for queue in queues:
            loop.call_later(OWN_DELAY, self._deliver, queue, False)

    def _deliver(self, queue: str, due: bool) -> None:
        if due:
            self.epoch += 1
        if queue == ALL:
            for _, future in self._waiters:
                if not future.done():
                    future.set_result(ALL)
            self._waiters.clear()
            self.pending.add(ALL)
            return
        for i, (queues, future) in enumerate(self._waiters):
            if queue in queues and not future.done():
                future.set_result(queue)
                del self._waiters[i]
                return
        self.pending.add(queue)

    def take(self, queues: Iterable[str]) -> bool:
        """True (and the news taken) when one of ``queues`` has news no worker took yet."""
        if ALL in self.pending:
            self.pending.discard(ALL)
            self.pending.update(queues)  # every other waiter looks once too
        for queue in queues:
            if queue in self.pending:
                self.pending.discard(queue)
                return True
        return False

    async def wait(self, queues: Iterable[str], timeout: float) -> bool:
        """Until news for ``queues`` (True) or ``timeout`` seconds (False).

        News kept while the caller was on its way here (reading when the next job
        falls due, say) counts: it came after the caller's last look at the store.
        """
        if self.take(queues):
            return True
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        entry = (frozenset(queues), future)
        self._waiters.append(entry)
        try:
            await asyncio.wait([future], timeout=timeout)
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)
            if future.done() and asyncio.current_task() is not None:
                # Cancelled just as the news came: keep it for the next waiter.
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    self.pending.add(future.result())
            elif not future.done():
                future.cancel()
        return future.done() and not future.cancelled()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None
        self.ready.clear()
