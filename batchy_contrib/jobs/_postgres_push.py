"""How the PostgreSQL job store enqueues: on its own connection, or in the app's transaction.

A job enqueued with ``connection=`` must exist if and only if the application's
transaction commits. What would break that is refused before anything is
written: a connection of the wrong kind (a blocking one awaited, which ran its
statement before the ``await`` failed), one to another database (the job would
land where no worker of this store looks), one in autocommit with no
transaction open (the job would commit at once) or with a query in progress
that hides whether one is (pipeline mode), and, for jobs with an
ordering key, an isolation level above READ COMMITTED (its snapshot may predate
the key's newest job, so the new one would become a second head).

The store's statement runs on a cursor of its own kind, so the application's
``row_factory`` or ``cursor_factory`` (dict rows, raw ``$1`` placeholders) does
not change how it reads its own result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from batchy.jobs import ConfigError, Envelope

from .._pg_idle import server_ended
from ._postgres_schema import Names, ensure_sync
from ._postgres_sql import KEY_WAIT_SECONDS

__all__ = ["PUSH", "PUSH_ONE", "PostgresPushing"]

PUSH = (
    "SELECT {s}.push(%s::text[], %s::text[], %s::text[], %s::float8[], %s::text[], "
    "%s::float8[], %s::text[])"
)
# The same call for one job, its arrays built by the server from plain values:
# psycopg adapts a Python list in Python, field by field, and seven one-element
# lists cost a single enqueue more client time than the rest of it.
PUSH_ONE = (
    "SELECT {s}.push(ARRAY[%s]::text[], ARRAY[%s]::text[], ARRAY[%s]::text[], "
    "ARRAY[%s::float8], ARRAY[%s]::text[], ARRAY[%s::float8], ARRAY[%s]::text[])"
)
_ADD_QUEUES = "INSERT INTO {s}.queues SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING"


class PostgresPushing:
    """The enqueue methods of :class:`PostgresBackend` (a mixin: see the module's docstring)."""

    names: Names
    dsn: str
    _sql: dict[str, str]
    _sync: psycopg.Connection[Any] | None
    _sync_lock: threading.Lock
    _schema_ready: bool
    _database: str | None  # the database's name, once connected
    _queues: set[str]  # queue names noted by this process

    async def pool(self) -> AsyncConnectionPool[Any]:
        raise NotImplementedError  # the store's own

    async def _all(self, query: str, params: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError  # the store's own

    check_envelopes: Callable[[Sequence[Envelope]], None]  # Backend's

    def _push_call(self, envelopes: Sequence[Envelope], now: float) -> tuple[str, Sequence[Any]]:
        """The push statement for ``envelopes`` and its parameters."""
        self.check_envelopes(envelopes)
        if len(envelopes) == 1:
            (e,) = envelopes
            offset = None if e.due is None else e.due - now
            one = (e.id, e.queue, e.payload, offset, e.unique, e.unique_ttl, e.key)
            return self._sql["push_one"], one
        return self._sql["push"], (
            [e.id for e in envelopes],
            [e.queue for e in envelopes],
            [e.payload for e in envelopes],
            # Only the offset crosses over: the function adds it to the server's clock.
            [None if e.due is None else e.due - now for e in envelopes],
            [e.unique for e in envelopes],
            [e.unique_ttl for e in envelopes],
            [e.key for e in envelopes],
        )

    async def push(
        self,
        envelopes: Sequence[Envelope],
        now: float,
        *,
        connection: psycopg.AsyncConnection[Any] | None = None,
    ) -> list[bool]:
        """Store jobs atomically; with ``connection``, inside that connection's transaction."""
        push, params = self._push_call(envelopes, now)
        if connection is None:
            with _keys_fit(self, envelopes, None):
                return _pushed((await self._all(push, params))[0])
        await self.pool()  # the schema exists before the app's transaction uses it
        async with await app_cursor(self, connection, self._database, _keyed(envelopes)) as cur:
            await self._add_queues(envelopes)
            with _keys_fit(self, envelopes, connection):
                await cur.execute(push, params)
            return _pushed(await cur.fetchone())

    async def _add_queues(self, envelopes: Sequence[Envelope]) -> None:
        """Note new queue names through the store's own connection, committed at once.

        The push notes them too; in an application's transaction, a new name's
        row would be locked until that transaction ends, and every other
        enqueue to the queue would wait for it.
        """
        new = self._new_queues(envelopes)
        if new:
            async with (await self.pool()).connection() as conn:
                await conn.execute(self.names.sql(_ADD_QUEUES), (new,))
            self._queues.update(new)

    def push_sync(
        self,
        envelopes: Sequence[Envelope],
        now: float,
        *,
        connection: psycopg.Connection[Any] | None = None,
    ) -> list[bool]:
        """``push`` for code without an event loop, on a blocking connection of its own."""
        push, params = self._push_call(envelopes, now)
        with self._sync_lock:
            own = self._sync_connection()  # also: the schema exists before the app uses it
            if connection is None:
                with _keys_fit(self, envelopes, None):
                    return _pushed(own.execute(push, params).fetchone())
            cursor = app_cursor_sync(self, connection, self._database, _keyed(envelopes))
            new = self._new_queues(envelopes)
            if new:  # as _add_queues
                own.execute(self.names.sql(_ADD_QUEUES), (new,))
                self._queues.update(new)
        with cursor, _keys_fit(self, envelopes, connection):
            cursor.execute(push, params)
            return _pushed(cursor.fetchone())

    def _new_queues(self, envelopes: Sequence[Envelope]) -> list[str]:
        return sorted({e.queue for e in envelopes} - self._queues)

    def _sync_connection(self) -> psycopg.Connection[Any]:
        """The blocking connection, made on first use (call it holding ``_sync_lock``)."""
        if self._sync is not None and not self._sync.closed and server_ended(self._sync):
            self._sync.close()  # the server ended it while idle (a restart, a failover)
        if self._sync is None or self._sync.closed:
            conn = psycopg.connect(self.dsn, autocommit=True)
            try:
                if not self._schema_ready:
                    ensure_sync(conn, self.names)
                    self._schema_ready = True
            except BaseException:
                conn.close()  # the next push opens another and checks the schema again
                raise
            self._sync, self._database = conn, conn.info.dbname
        return self._sync


def _pushed(row: Any) -> list[bool]:
    return list(row[0]) if row is not None else []


def _keyed(envelopes: Sequence[Envelope]) -> bool:
    return any(e.key is not None for e in envelopes)


@contextmanager
def _keys_fit(store: object, envelopes: Sequence[Envelope], connection: object) -> Iterator[None]:
    """Say what a keyed push that ran out of the server's lock table should do instead.

    A push locks each ordering key it names until its transaction ends (see
    lock_keys), and the server's lock table has room for max_locks_per_transaction
    locks per connection, shared by all sessions: a push of thousands of distinct
    keys, or thousands of keyed enqueues in one transaction, fail with "out of
    shared memory", which names neither the cause nor the fix.
    """
    try:
        yield
    except psycopg.errors.LockNotAvailable as error:
        keys = sorted({e.key for e in envelopes if e.key is not None})
        if not keys:
            raise
        raise ConfigError(
            f"{store!r}: {_shown(keys)} stayed held by another open transaction for "
            f"{KEY_WAIT_SECONDS} s: one that enqueued a job with such a key and has not "
            "ended. If that transaction is your own, enqueue in it (connection=...): "
            "this push waited for it, and it cannot end until the push returns; "
            f"{_aborted(connection)}"
        ) from error
    except psycopg.errors.OutOfMemory as error:
        keys = sorted({e.key for e in envelopes if e.key is not None})
        if not keys or "max_locks_per_transaction" not in (error.diag.message_hint or ""):
            raise  # not the keys' doing: the server's own words
        where = _aborted(connection)
        shown = _listed(keys)
        raise ConfigError(
            # (The queue puts the job types in front: see Queue.enqueue_many.)
            f"{store!r}: enqueueing {len(envelopes)} jobs with "
            f"{len(keys)} distinct ordering keys ({shown}) ran out of PostgreSQL's lock "
            "table, which all sessions share (each key stays locked until its transaction "
            "ends, with the keys of earlier enqueues in the "
            f"same transaction); {where}. Enqueue jobs with ordering keys in separate "
            "transactions of at most a few hundred keys each, or raise the server's "
            "max_locks_per_transaction"
        ) from error


def _listed(keys: list[str]) -> str:
    return ", ".join(repr(k) for k in keys[:3]) + (", ..." if len(keys) > 3 else "")


def _shown(keys: list[str]) -> str:
    named = _listed(keys)
    return f"the ordering key {named}" if len(keys) == 1 else f"one of the ordering keys {named}"


def _aborted(connection: object) -> str:
    if connection is not None:
        return "the application's transaction is aborted: roll it back"
    return "nothing was enqueued"


async def app_cursor(
    store: object, connection: Any, database: str | None, keyed: bool
) -> psycopg.AsyncCursor[tuple[Any, ...]]:
    """A cursor on ``connection`` for ``store``'s push, after the checks above."""
    _check(store, connection, psycopg.AsyncConnection, database)
    cursor = psycopg.AsyncCursor(connection, row_factory=tuple_row)
    if keyed:
        idle = connection.info.transaction_status == TransactionStatus.IDLE
        await cursor.execute("SHOW transaction_isolation")
        try:
            _check_isolation(store, connection, await cursor.fetchone())
        except ConfigError:
            await cursor.close()
            if idle:  # the SHOW began the transaction: end it, as it was before
                await connection.rollback()
            raise
    return cursor


def app_cursor_sync(
    store: object, connection: Any, database: str | None, keyed: bool
) -> psycopg.Cursor[tuple[Any, ...]]:
    """:func:`app_cursor` for ``push_sync``."""
    _check(store, connection, psycopg.Connection, database)
    cursor = psycopg.Cursor(connection, row_factory=tuple_row)
    if keyed:
        idle = connection.info.transaction_status == TransactionStatus.IDLE
        cursor.execute("SHOW transaction_isolation")
        try:
            _check_isolation(store, connection, cursor.fetchone())
        except ConfigError:
            cursor.close()
            if idle:  # as app_cursor
                connection.rollback()
            raise
    return cursor


_Kind = type[psycopg.Connection[Any]] | type[psycopg.AsyncConnection[Any]]
_IN_TRANSACTION = (TransactionStatus.INTRANS, TransactionStatus.INERROR)


def _check(store: object, connection: Any, kind: _Kind, database: str | None) -> None:
    if not isinstance(connection, kind):
        raise ConfigError(f"{store!r}: connection={connection!r} {_wrong_kind(connection, kind)}")
    # In autocommit mode only a transaction block that has begun makes the push
    # part of something; a query in progress (pipeline mode, another task on the
    # connection) hides whether one has, so that is refused too.
    if connection.autocommit and connection.info.transaction_status not in _IN_TRANSACTION:
        raise ConfigError(
            f"{store!r}: connection={connection!r} is in autocommit mode with no transaction "
            "open, so the job would be committed at once, whatever your code does next; "
            "enqueue inside the transaction (`async with conn.transaction():` or "
            "`with conn.transaction():`, outside a pipeline block), or leave out "
            "connection= to enqueue on its own; nothing was enqueued"
        )
    theirs = connection.info.dbname
    if database is not None and theirs != database:
        raise ConfigError(
            f"{store!r}: connection={connection!r} is connected to database {theirs!r}, but "
            f"this store's jobs are in database {database!r}; a transaction can only include "
            "jobs of the database it writes to: enqueue through a connection to "
            f"{database!r}, or leave out connection=; nothing was enqueued"
        )


def _wrong_kind(connection: Any, kind: _Kind) -> str:
    if kind is psycopg.AsyncConnection and isinstance(connection, psycopg.Connection):
        return (
            "is a blocking psycopg.Connection, but `await ...enqueue(...)` needs a "
            "psycopg.AsyncConnection; with this connection call enqueue_sync(...) "
            "instead; nothing was enqueued"
        )
    if kind is psycopg.Connection and isinstance(connection, psycopg.AsyncConnection):
        return (
            "is a psycopg.AsyncConnection, but enqueue_sync(...) needs a blocking "
            "psycopg.Connection; with this connection `await ...enqueue(...)` instead; "
            "nothing was enqueued"
        )
    return (
        f"is not a psycopg connection (got {type(connection).__name__}); pass the psycopg 3 "
        "connection your transaction runs on (an AsyncConnection to `await enqueue(...)`, a "
        "Connection to enqueue_sync(...)), not a pool, cursor or other driver's connection; "
        "nothing was enqueued"
    )


def _check_isolation(store: object, connection: Any, row: tuple[Any, ...] | None) -> None:
    level = row[0] if row else None
    # PostgreSQL runs READ UNCOMMITTED as READ COMMITTED.
    if level not in ("read committed", "read uncommitted"):
        raise ConfigError(
            f"{store!r}: connection={connection!r} runs its transaction at isolation level "
            f"{level!r}; jobs with an ordering key (key=...) keep their order only when "
            "enqueued under READ COMMITTED (an older snapshot may miss the key's newest job "
            "and start a second head); enqueue keyed jobs from a READ COMMITTED "
            "transaction, or leave out connection=; nothing was enqueued"
        )
