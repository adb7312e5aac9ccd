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
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from batchy.jobs import ConfigError, Envelope

from ._postgres_pools import Reach, connect_sync, sync_pool
from ._postgres_schema import Names, ensure_sync
from ._postgres_sql import KEY_WAIT_SECONDS

__all__ = ["OPENING", "PUSH", "PUSH_ONE", "SERVER_ID", "PostgresPushing", "first_text", "writable"]

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
# Which server a connection reaches: two servers may each have a database of the
# store's name (a staging copy, a restored dump) and even its schema, and a job
# committed on the other one is never run. The cluster's system identifier stays
# through restarts and physical failovers; where the function is not granted
# (a hosted server may revoke it) the question goes unasked.
_SERVER = (
    "CASE WHEN has_function_privilege('pg_control_system()', 'EXECUTE') "
    "THEN (SELECT system_identifier::text FROM pg_control_system()) END"
)
SERVER_ID = f"SELECT {_SERVER}"
# What the store asks as it opens (the server, then whether it takes writes): a
# read-only database failed the first enqueue with "cannot execute CREATE SCHEMA
# in a read-only transaction", or a worker's turn with a page of the cycle's SQL.
OPENING = f"SELECT {_SERVER}, current_setting('transaction_read_only'), pg_is_in_recovery()"
# What a push in the app's transaction asks of it first, in one round trip: the
# isolation level (a boolean too, for a client_encoding such as SQL_ASCII gives
# text back as bytes) and the server.
_PROBE = (
    "SELECT current_setting('transaction_isolation'), current_setting("
    f"'transaction_isolation') IN ('read committed', 'read uncommitted'), {_SERVER}"
)


class PostgresPushing:
    """The enqueue methods of :class:`PostgresBackend` (a mixin: see the module's docstring)."""

    names: Names
    dsn: str
    _sql: dict[str, str]
    _sync: ConnectionPool[Any] | None
    pool_size: int
    _sync_lock: threading.Lock
    _reach: Reach  # why the store's last connect failed, if it did
    _schema_ready: bool
    _database: str | None  # the database's name, once connected
    _server: str | None  # its server's system identifier, once connected (if granted)
    _vouched: weakref.WeakSet[Any]  # app connections found on that server
    _queues: set[str]  # queue names noted by this process

    async def pool(self) -> AsyncConnectionPool[Any]:
        raise NotImplementedError  # the store's own

    async def _all(self, query: str, params: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError  # the store's own

    check_envelopes: Callable[[Sequence[Envelope]], None]  # Backend's
    describe: Callable[[], str]  # Backend's

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
        began = time.monotonic()
        await self.pool()  # the schema exists before the app's transaction uses it
        with _opened(self, time.monotonic() - began):
            async with await app_cursor(self, connection, _keyed(envelopes)) as cur:
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
        began = time.monotonic()
        pool = self._sync_pool()  # also: the schema exists before the app uses it
        if connection is None:
            with pool.connection() as own, _keys_fit(self, envelopes, None):
                return _pushed(own.execute(push, params).fetchone())
        with _opened(self, time.monotonic() - began):
            cursor = app_cursor_sync(self, connection, _keyed(envelopes))
        new = self._new_queues(envelopes)
        if new:  # as _add_queues
            with pool.connection() as own:
                own.execute(self.names.sql(_ADD_QUEUES), (new,))
            self._queues.update(new)
        with cursor, _keys_fit(self, envelopes, connection):
            cursor.execute(push, params)
            return _pushed(cursor.fetchone())

    def _new_queues(self, envelopes: Sequence[Envelope]) -> list[str]:
        return sorted({e.queue for e in envelopes} - self._queues)

    def _sync_pool(self) -> ConnectionPool[Any]:
        """The blocking connections, a pool made on first use.

        A pool, not one connection: a push may wait up to KEY_WAIT for an ordering
        key an open transaction holds, and the other threads' pushes go on meanwhile.
        """
        with self._sync_lock:
            if self._sync is not None:
                return self._sync

            try:
                first = connect_sync(self.dsn)
            except psycopg.OperationalError as error:
                raise self._reach.refused(error) from error
            with first as conn:
                server = writable(self, conn.execute(OPENING).fetchone())
                if not self._schema_ready:
                    ensure_sync(conn, self.names)
                    self._schema_ready = True
                self._database = conn.info.dbname
                self._server = server
            pool = sync_pool(self.dsn, self._reach, self.pool_size)
            try:
                pool.open(wait=True)
            except BaseException:
                pool.close()
                raise
            self._sync = pool
            return pool


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
        if not keys or "lock_keys" not in (error.diag.context or ""):
            # A row, not a key: another transaction inserted a job of one of these
            # ids (or took one of their unique keys) and has not ended.
            ids = _listed([e.id for e in envelopes])
            raise ConfigError(
                f"{store!r}: another open transaction is enqueueing a job with one of these "
                f"ids or unique keys (job id {ids}) and has not ended after "
                f"{KEY_WAIT_SECONDS} s. If that transaction is your own, enqueue in it "
                "(connection=...); otherwise the id is taken once it commits. "
                f"{_aborted(connection).capitalize()}"
            ) from error
        raise ConfigError(
            f"{store!r}: {_shown(keys)} stayed held by another open transaction for "
            f"{KEY_WAIT_SECONDS} s: one that enqueued a job with such a key and has not "
            "ended. If that transaction is your own, enqueue in it (connection=...): "
            "this push waited for it, and it cannot end until the push returns; "
            f"{_aborted(connection)}"
        ) from error
    except psycopg.errors.DeadlockDetected as error:
        keys = sorted({e.key for e in envelopes if e.key is not None})
        if keys:  # the driver's error stays (an application may retry on it)
            error.add_note(
                f"{store!r}: this transaction and another both enqueued jobs with ordering keys "
                f"({_listed(keys)} here), in opposite orders; enqueue a transaction's keyed jobs "
                "in one enqueue_many (it takes their keys in one order), or in a fixed order"
            )
        raise
    except UnicodeEncodeError as error:  # before anything was sent
        encoding = getattr(getattr(connection, "info", None), "encoding", "?")
        raise ConfigError(
            f"{store!r}: connection={connection!r} uses client_encoding {encoding!r}, which "
            f"cannot carry {error.object[error.start : error.end]!r} of job id "
            f"{_listed([e.id for e in envelopes])} (or of its arguments); enqueue through a "
            "connection with client_encoding 'UTF8', or leave out connection=; nothing was "
            "enqueued"
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


@contextmanager
def _opened(store: object, took: float) -> Iterator[None]:
    """Say why the server ended the application's transaction, if it did for idling.

    The first enqueue of a process opens the store's connections and checks (or
    creates, or migrates) its schema while the application's transaction waits:
    longer than a role's idle_in_transaction_session_timeout of 100 ms, say, and
    the server ended the application's connection with no word of why it idled.
    """
    try:
        yield
    except psycopg.errors.IdleInTransactionSessionTimeout as error:
        error.add_note(
            f"{store!r}: this enqueue first opened the store's connections and checked its "
            f"schema, which took {took:.2f} s while your transaction waited, longer than the "
            "server's idle_in_transaction_session_timeout; open the store before your "
            "transactions begin (await backend.migrate() at start-up); nothing was enqueued"
        )
        raise


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
    store: PostgresPushing, connection: Any, keyed: bool
) -> psycopg.AsyncCursor[tuple[Any, ...]]:
    """A cursor on ``connection`` for ``store``'s push, after the checks above."""
    _check(store, connection, psycopg.AsyncConnection)
    cursor = psycopg.AsyncCursor(connection, row_factory=tuple_row)
    if keyed or _unvouched(store, connection):
        idle = connection.info.transaction_status == TransactionStatus.IDLE
        try:
            await cursor.execute(_PROBE)
            row = await cursor.fetchone()
            if _other_server(store, row):  # or the store's moved: ask its own connection
                async with (await store.pool()).connection() as own:
                    store._server = first_text(await (await own.execute(SERVER_ID)).fetchone())
            _judge(store, connection, keyed, row)
        except BaseException as error:
            await cursor.close()
            if idle and isinstance(error, ConfigError):  # the probe began it: as it was
                await connection.rollback()
            raise
    return cursor


def app_cursor_sync(
    store: PostgresPushing, connection: Any, keyed: bool
) -> psycopg.Cursor[tuple[Any, ...]]:
    """:func:`app_cursor` for ``push_sync``."""
    _check(store, connection, psycopg.Connection)
    cursor = psycopg.Cursor(connection, row_factory=tuple_row)
    if keyed or _unvouched(store, connection):
        idle = connection.info.transaction_status == TransactionStatus.IDLE
        try:
            cursor.execute(_PROBE)
            row = cursor.fetchone()
            if _other_server(store, row):  # as app_cursor
                with store._sync_pool().connection() as own:
                    store._server = first_text(own.execute(SERVER_ID).fetchone())
            _judge(store, connection, keyed, row)
        except BaseException as error:
            cursor.close()
            if idle and isinstance(error, ConfigError):
                connection.rollback()
            raise
    return cursor


def writable(store: PostgresPushing, row: tuple[Any, ...] | None) -> Any:
    """The server's identity from an :data:`OPENING` row; raises if it takes no writes."""
    values = [first_text(row[i:]) if row else None for i in range(3)]
    if values[2] is True or values[2] == "t":
        why = (
            "it is a standby in recovery (a read replica), where no transaction may write; "
            "point the store at the primary server"
        )
    elif values[1] == "on":
        why = (
            "its transactions start read-only (default_transaction_read_only = on, set "
            "for this role or database); give the store a role or database whose "
            "transactions may write (ALTER ROLE <role> SET default_transaction_read_only "
            "= off), or point it at the primary server if this one is a replica"
        )
    else:
        return values[0]
    raise ConfigError(
        f"{store.describe()} cannot write: {why}. The store "
        "writes on every enqueue and every worker's turn; nothing was written"
    )


def first_text(row: tuple[Any, ...] | None) -> Any:
    """A row's first value, as text where a client_encoding (SQL_ASCII) gave bytes."""
    value = row[0] if row else None
    return value.decode() if isinstance(value, bytes) else value


def _unvouched(store: PostgresPushing, connection: Any) -> bool:
    return store._server is not None and connection not in store._vouched


def _other_server(store: PostgresPushing, row: tuple[Any, ...] | None) -> bool:
    theirs = first_text(row[2:]) if row else None
    return None not in (theirs, store._server) and theirs != store._server


def _judge(
    store: PostgresPushing, connection: Any, keyed: bool, row: tuple[Any, ...] | None
) -> None:
    """Refuse ``connection`` (after :data:`_PROBE` gave ``row``) if the push cannot join it."""
    level, committed = first_text(row), bool(row and row[1])
    if _other_server(store, row):
        raise ConfigError(
            f"{store!r}: connection={connection!r} reaches another PostgreSQL server (system "
            f"identifier {first_text(row[2:] if row else None)}) than this store's "
            f"({store._server}), though both have a database {store._database!r}; the job "
            "would be written where no worker of this store looks: enqueue through a "
            "connection to the store's server, or leave out connection=; nothing was enqueued"
        )
    store._vouched.add(connection)
    # PostgreSQL runs READ UNCOMMITTED as READ COMMITTED.
    if keyed and not committed:
        raise ConfigError(
            f"{store!r}: connection={connection!r} runs its transaction at isolation level "
            f"{level!r}; jobs with an ordering key (key=...) keep their order only when "
            "enqueued under READ COMMITTED (an older snapshot may miss the key's newest job "
            "and start a second head); enqueue keyed jobs from a READ COMMITTED "
            "transaction, or leave out connection=; nothing was enqueued"
        )


_Kind = type[psycopg.Connection[Any]] | type[psycopg.AsyncConnection[Any]]
_IN_TRANSACTION = (TransactionStatus.INTRANS, TransactionStatus.INERROR)


def _check(store: PostgresPushing, connection: Any, kind: _Kind) -> None:
    if not isinstance(connection, kind):
        raise ConfigError(f"{store!r}: connection={connection!r} {_wrong_kind(connection, kind)}")
    if connection.closed:
        raise ConfigError(
            f"{store!r}: connection={connection!r} is closed; enqueue through the open "
            "connection your transaction runs on; nothing was enqueued"
        )
    if connection.info.transaction_status == TransactionStatus.INERROR:
        raise ConfigError(
            f"{store!r}: connection={connection!r} is in a transaction that an earlier "
            "statement's error aborted, so nothing it writes can commit; roll it back "
            "and enqueue in the transaction that runs again; nothing was enqueued"
        )
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
    theirs, database = connection.info.dbname, store._database
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
