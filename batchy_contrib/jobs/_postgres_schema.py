"""Where the PostgreSQL job store's schema is created, checked against its version, and migrated.

The store calls :func:`ensure_async` (or :func:`ensure_sync` for code without an
event loop) once per connection pool, before its first step. Both run the same
statements, in one transaction under an advisory lock, so processes that start
together create the schema once.

A migration alters tables a live queue uses, and PostgreSQL grants a table's
locks in order: an ``ALTER TABLE`` that waits for an application's open
transaction (one that enqueued holds a lock on the jobs table until it ends)
makes every later statement on that table wait behind it, so every worker and
every enqueue would stand still for as long as that transaction stays open. So
an attempt does not ask for its locks while a transaction older than
``LOCK_WAIT`` holds one of the tables it alters (one that only replaces
functions or adds tables waits for nobody), waits at most ``LOCK_WAIT``
for them otherwise, and on either rolls back, gives the tables back for a
growing pause and tries again, for ``MIGRATE_FOR`` seconds in all; then
:class:`MigrationTimeout` names the sessions that held the tables. A prepared
transaction (``PREPARE TRANSACTION``: two-phase commit) holds its locks with no
session: it counts as any transaction, named by its gid, until someone commits or
rolls it back.

An autovacuum worker holds a table it vacuums, but gives way: the server
cancels it once a conflicting lock request has waited ``deadlock_timeout``
(1 s by default). So it is no reason to hold back, and no one to name; an
attempt it stands in the way of waits ``deadlock_timeout`` plus ``LOCK_WAIT``
instead (one that gave up first would never get past it). A vacuum "to prevent
wraparound" does not give way, and counts as any transaction.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
import zlib
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import psycopg

from batchy.jobs import ConfigError

from . import _postgres_sql as ddl

__all__ = ["MigrationTimeout", "SchemaVersionError", "Names", "ensure_async", "ensure_sync"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,40}")
# Schemas whose tables are not the store's to make (an app's `jobs` table lives there).
_SHARED = {"public", "information_schema"}
log = logging.getLogger("batchy.jobs")

LOCK_WAIT = 1.0  # seconds an attempt may hold up the tables it waits for
MIGRATE_FOR = 60.0  # seconds of attempts before MigrationTimeout


class SchemaVersionError(ConfigError):
    """The database holds a job schema of a version this release of batchy cannot use."""


class MigrationTimeout(SchemaVersionError):
    """A migration could not lock the job tables: open transactions held them the whole time."""


class Names:
    """The SQL spelling of one schema: quoted name, NOTIFY channel, advisory lock space."""

    def __init__(self, schema: str) -> None:
        if not isinstance(schema, str) or not _NAME.fullmatch(schema):
            raise ConfigError(
                f"PostgresBackend(schema={schema!r}): a schema name is an ASCII letter or '_' "
                "and up to 40 more ASCII letters, digits or '_' (e.g. schema='batchy_jobs')"
            )
        reserved = schema.lower().startswith("pg_")
        if reserved or schema.lower() in _SHARED:
            why = "reserved by PostgreSQL" if reserved else "shared with other tables"
            raise ConfigError(
                f"PostgresBackend(schema={schema!r}): the store needs a schema of its own, and "
                f"{schema!r} is {why}; name another (e.g. schema='batchy_jobs')"
            )
        self.schema = schema
        self.quoted = '"' + schema + '"'
        self.channel = "batchy_" + schema
        # Two 32-bit advisory lock spaces of this schema: its ordering keys, and
        # creating or migrating it. Other schemas (other apps) use other spaces.
        self.space = zlib.crc32(("batchy:" + schema).encode()) - 2**31
        self.setup_lock = (self.space << 32) | 0x5C4E  # one bigint, beside the key locks

    def sql(self, text: str) -> str:
        """``text`` with ``{s}``, ``{chan}`` and ``{space}`` filled in."""
        return text.format(s=self.quoted, chan="'" + self.channel + "'", space=self.space)

    def prepare(self) -> list[str]:
        """Statements that lock out other creators, bound every later lock wait of the
        transaction to ``LOCK_WAIT`` and make the version table."""
        return [
            f"SELECT pg_advisory_xact_lock({self.setup_lock})",
            f"SET LOCAL lock_timeout = '{max(1, round(LOCK_WAIT * 1000))}ms'",
            f"CREATE SCHEMA IF NOT EXISTS {self.quoted}",
            f"CREATE TABLE IF NOT EXISTS {self.quoted}.version (version int NOT NULL)",
        ]

    def read_version(self) -> str:
        return f"SELECT max(version) FROM {self.quoted}.version"

    def current(self, row: object) -> bool:
        """Whether the version read (:meth:`read_version`) is this release's; a newer one raises."""
        found = _version(row)
        if found is not None and found > ddl.VERSION:
            self.upgrade(found)  # raises SchemaVersionError
        return found == ddl.VERSION

    def upgrade(self, found: int | None) -> list[str]:
        """The statements that take a schema at version ``found`` (None: new) to ours."""
        if found is None:
            return [self.sql(ddl.SCHEMA), self._stamp(ddl.VERSION)]
        if found > ddl.VERSION:
            raise SchemaVersionError(
                f"schema {self.schema!r} holds batchy job tables of version {found}, newer "
                f"than this release of batchy understands (version {ddl.VERSION}); upgrade "
                "batchy on this machine, or point it at another schema (schema=...)"
            )
        steps = []
        for version in range(found, ddl.VERSION):
            steps += [self.sql(ddl.MIGRATIONS[version]), self._stamp(version + 1)]
        return steps

    def _stamp(self, version: int) -> str:
        table = f"{self.quoted}.version"
        return f"DELETE FROM {table}; INSERT INTO {table} VALUES ({version})"


# A schema that is current needs only a read: plain table rights. Creating or
# migrating one needs CREATE on the database and the schema, which the docs ask
# for the first time only; every pool's first connection used to ask for it.
_MISSING = (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName)
# A new schema's table or function whose name something else has taken there.
_TAKEN = (
    psycopg.errors.DuplicateTable,
    psycopg.errors.DuplicateFunction,
    psycopg.errors.DuplicateObject,
)


def _taken(names: Names, error: psycopg.Error) -> str:
    return (
        f"cannot create the job tables in schema {names.schema!r}: "
        f"{str(error).splitlines()[0]}; the schema holds tables or functions that are not "
        "the store's. Give the store a schema of its own (schema=...); nothing was created"
    )


# A role without the rights the store needs: PostgreSQL names the object it refused
# ("permission denied for database app"), not the store, nor the GRANT that fixes it.
_DENIED = psycopg.errors.InsufficientPrivilege


def _denied(names: Names, conn: Any, error: psycopg.Error, making: bool) -> str:
    """Why the role of ``conn`` cannot read (or, ``making``, create or migrate) the schema."""
    role, database, said = conn.info.user, conn.info.dbname, str(error).splitlines()[0]
    if making:
        return (
            f"cannot create or migrate the job schema {names.schema!r} in database "
            f"{database!r} as role {role!r} ({said}): that needs CREATE on the database (the "
            "first time) and ownership of the schema's tables (a migration). Run `batchy migrate "
            "APP` (or `await backend.migrate()`) once at deploy time as a role that has them "
            f"(the owner of the database), or GRANT CREATE ON DATABASE {_ident(database)} TO "
            f"{_ident(role)}; nothing was created"
        )
    s, r = names.quoted, _ident(role)
    return (
        f"cannot read the job schema {names.schema!r} in database {database!r} as role "
        f"{role!r} ({said}): the store's role needs USAGE on the schema, SELECT, INSERT, "
        "UPDATE and DELETE on its tables, USAGE on its sequences and EXECUTE on its "
        f"functions. As the schema's owner: GRANT USAGE ON SCHEMA {s} TO {r}; GRANT SELECT, "
        f"INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {s} TO {r}; GRANT USAGE ON ALL "
        f"SEQUENCES IN SCHEMA {s} TO {r}; GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {s} TO {r}"
    )


def _ident(name: str) -> str:
    """``name`` as SQL spells an identifier."""
    return '"' + name.replace('"', '""') + '"'


async def ensure_async(conn: psycopg.AsyncConnection[object], names: Names) -> None:
    """Create or migrate the schema through ``conn`` (an autocommit connection)."""
    try:
        if names.current(await (await conn.execute(names.read_version())).fetchone()):
            return
    except _MISSING:
        pass
    except _DENIED as error:
        raise ConfigError(_denied(names, conn, error, making=False)) from error
    try:
        await _make_async(conn, names)
    except _DENIED as error:
        raise ConfigError(_denied(names, conn, error, making=True)) from error


async def _make_async(conn: psycopg.AsyncConnection[object], names: Names) -> None:
    for attempt in _Attempts(names):
        try:
            async with conn.transaction():
                for statement in names.prepare():
                    await conn.execute(statement)
                row = await (await conn.execute(names.read_version())).fetchone()
                steps = attempt.steps(_version(row))
                if attempt.alters:  # are the tables it alters free?
                    holders = await (await conn.execute(_HOLDERS, attempt.args)).fetchall()
                    steps = attempt.check(holders) + steps
                for statement in steps:
                    await conn.execute(statement)
            return
        except (psycopg.errors.LockNotAvailable, _Held) as error:
            holders = await (await conn.execute(_HOLDERS, attempt.args)).fetchall()
            await asyncio.sleep(attempt.failed(error, holders))
        except _TAKEN as error:
            raise ConfigError(_taken(names, error)) from error


def ensure_sync(conn: psycopg.Connection[object], names: Names) -> None:
    """:func:`ensure_async` for a blocking connection."""
    try:
        if names.current(conn.execute(names.read_version()).fetchone()):
            return
    except _MISSING:
        pass
    except _DENIED as error:
        raise ConfigError(_denied(names, conn, error, making=False)) from error
    try:
        _make_sync(conn, names)
    except _DENIED as error:
        raise ConfigError(_denied(names, conn, error, making=True)) from error


def _make_sync(conn: psycopg.Connection[object], names: Names) -> None:
    for attempt in _Attempts(names):
        try:
            with conn.transaction():
                for statement in names.prepare():
                    conn.execute(statement)
                row = conn.execute(names.read_version()).fetchone()
                steps = attempt.steps(_version(row))
                if attempt.alters:
                    steps = attempt.check(conn.execute(_HOLDERS, attempt.args).fetchall()) + steps
                for statement in steps:
                    conn.execute(statement)
            return
        except (psycopg.errors.LockNotAvailable, _Held) as error:
            holders = conn.execute(_HOLDERS, attempt.args).fetchall()
            time.sleep(attempt.failed(error, holders))
        except _TAKEN as error:
            raise ConfigError(_taken(names, error)) from error


# Who else holds locks on the schema's tables (those named, or all when NULL) in
# this database, with the age of their transactions in s, oldest first (see
# _Holder): sessions, and prepared transactions, which no session runs. A
# prepared one's locks have no pid; pg_prepared_xacts names it by its
# transaction id, which only its lock on that id carries (beside the same
# virtual transaction as its other locks). An autovacuum worker's query names
# the table, and says so when it vacuums to prevent wraparound.
_HOLDERS = """
WITH held AS (
  SELECT l.pid, l.virtualtransaction AS vxid, l.relation::regclass::text AS tab
  FROM pg_locks l
  WHERE l.granted AND l.pid IS DISTINCT FROM pg_backend_pid()
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND l.relation IN (
      SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = %s AND c.relkind IN ('r', 'p')
        AND (%s::text[] IS NULL OR c.relname = ANY(%s::text[]))))
SELECT CASE WHEN a.backend_type = 'autovacuum worker'
            AND a.query NOT LIKE '%%(to prevent wraparound)' THEN 'autovacuum'
            ELSE 'session' END,
       a.pid, NULL, a.state, extract(epoch FROM clock_timestamp() - a.xact_start)::float8,
       left(a.query, 60), string_agg(DISTINCT h.tab, ', '), NULL, NULL
FROM held h JOIN pg_stat_activity a ON a.pid = h.pid
GROUP BY a.pid, a.backend_type, a.state, a.xact_start, a.query
UNION ALL
SELECT 'prepared', NULL, p.gid, NULL, extract(epoch FROM clock_timestamp() - p.prepared)::float8,
       NULL, string_agg(DISTINCT h.tab, ', '), p.owner::text, p.database::text
FROM held h
JOIN pg_locks x ON x.locktype = 'transactionid' AND x.pid IS NULL
  AND x.virtualtransaction = h.vxid
JOIN pg_prepared_xacts p ON p.transaction = x.transactionid
WHERE h.pid IS NULL
GROUP BY p.gid, p.prepared, p.owner, p.database
ORDER BY 5 DESC NULLS LAST, 2, 3
"""


class _Holder(NamedTuple):
    """One row of ``_HOLDERS``: a session or prepared transaction holding some of the tables."""

    kind: str  # 'session', 'autovacuum' (a worker that gives way) or 'prepared'
    pid: int | None  # a session's
    gid: str | None  # a prepared transaction's
    state: str | None
    age: float | None  # seconds since its transaction began (was prepared)
    query: str | None
    tables: str
    owner: str | None  # a prepared transaction's role and database
    database: str | None

    def name(self) -> str:
        return f"pid {self.pid}" if self.gid is None else f"prepared transaction {self._gid()}"

    def describe(self) -> str:
        age = "?" if self.age is None else f"{self.age:.0f}"
        if self.gid is None:
            what = f"{self.state} for {age} s, last query {self.query!r}"
        else:
            what = f"prepared {age} s ago by role {self.owner} on database {self.database}"
        return f"{self.name()} ({what}) holds a lock on {self.tables}"

    def end(self) -> str:
        """How to end it."""
        if self.gid is None:
            return _END
        return (
            f"finish prepared transaction {self._gid()} from a session on database "
            f"{self.database}: COMMIT PREPARED {self._gid()} or ROLLBACK PREPARED "
            f"{self._gid()}, whichever its transaction manager meant (no session runs it: "
            "pg_terminate_backend cannot end it)"
        )

    def _gid(self) -> str:
        return "'" + str(self.gid).replace("'", "''") + "'"  # as SQL spells it


class _Held(Exception):
    """A transaction older than LOCK_WAIT holds the tables: an attempt now would only wait."""


class _Attempts:
    """The attempts of one creation or migration, with a growing pause after each failure.

    Before it alters a table, an attempt looks at who holds the schema's tables:
    while a transaction older than ``LOCK_WAIT`` holds one (an application's,
    open since who knows when), it does not queue its own lock request behind
    it, which would hold every worker up for ``LOCK_WAIT`` on each attempt. It
    waits, then looks again.
    """

    def __init__(self, names: Names) -> None:
        self.names = names
        self.found: int | None = None  # the version the last attempt read
        self.alters: list[str] = []  # the existing tables its steps alter
        self.deadline = time.monotonic() + MIGRATE_FOR
        self.tries = 0

    def __iter__(self) -> Iterator[_Attempts]:
        while True:
            self.tries += 1
            yield self

    def steps(self, found: int | None) -> list[str]:
        """The statements that take version ``found`` to ours; notes the tables they alter."""
        self.found = found
        steps = self.names.upgrade(found)
        # Only a migration that alters an existing table (ALTER TABLE, CREATE INDEX)
        # queues behind that table's holders; new tables and functions do not.
        self.alters = [] if found is None else sorted(set(_ALTERS.findall("".join(steps))))
        return steps

    @property
    def args(self) -> tuple[object, ...]:
        tables = self.alters or None
        return (self.names.schema, tables, tables)

    def check(self, rows: Sequence[Any]) -> list[str]:
        """Raises ``_Held`` while a transaction older than LOCK_WAIT holds the tables;
        else the statements that set this attempt's wait for them."""
        holders = _holders(rows)
        if _long(holders):
            raise _Held()
        if any(h.kind == "autovacuum" for h in holders):
            # The server cancels an autovacuum worker in the way of a lock request
            # that has waited deadlock_timeout: an attempt that gave up sooner
            # (LOCK_WAIT is 1 s, as deadlock_timeout by default) would never pass it.
            wait = max(1, round(LOCK_WAIT * 1000))
            return [
                "SELECT set_config('lock_timeout', (setting::bigint + "
                f"{wait})::text || 'ms', true) FROM pg_settings WHERE name = 'deadlock_timeout'"
            ]
        return []

    def failed(self, error: Exception, rows: Sequence[Any]) -> float:
        """The pause before the next attempt; raises :class:`MigrationTimeout` when out of time."""
        holders = _holders(rows)
        pause = min(5.0, LOCK_WAIT * 2.0 ** (self.tries - 1)) * random.uniform(0.5, 1.0)
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise MigrationTimeout(self._explain(holders)) from error
        if self.tries == 1:
            log.warning(
                "job schema %r: migration waits for a lock held by %s; trying again for up to %g s",
                self.names.schema,
                ", ".join(h.name() for h in _named(holders)) or "another session",
                MIGRATE_FOR,
            )
        return min(pause, left)

    def _explain(self, holders: list[_Holder]) -> str:
        target = "" if self.found is None else f" from version {self.found}"
        named = _named(holders)
        held = "; ".join(h.describe() for h in named)
        end = "; ".join(dict.fromkeys(h.end() for h in named)) or _END
        return (
            f"cannot migrate job schema {self.names.schema!r}{target} to {ddl.VERSION}: other "
            f"transactions held its tables through {self.tries} attempts over {MIGRATE_FOR:g} s "
            f"(an attempt waits at most {LOCK_WAIT:g} s for a lock, and none while a "
            "transaction older than that holds one), and waiting longer would stop every "
            f"worker and enqueue behind it. {held or _NOBODY}. {end[0].upper()}{end[1:]}, or "
            "migrate at deploy time (await backend.migrate()) while no transaction holds the "
            "job tables"
        )


_ALTERS = re.compile(r'(?:ALTER TABLE|CREATE INDEX[^;]*? ON)\s+"\w+"\.(\w+)')
_NOBODY = "No transaction holds them now"
_END = "end that transaction (or pg_terminate_backend(pid))"


def _holders(rows: Sequence[Any]) -> list[_Holder]:
    return [_Holder(*row) for row in rows]


def _long(holders: list[_Holder]) -> list[_Holder]:
    """The holders that do not give way, whose transactions are older than LOCK_WAIT."""
    return [
        h for h in holders if h.kind != "autovacuum" and h.age is not None and h.age >= LOCK_WAIT
    ]


def _named(holders: list[_Holder]) -> list[_Holder]:
    """The holders to name: those that held up the attempts, else any that do not give way."""
    return _long(holders) or [h for h in holders if h.kind != "autovacuum"]


def _version(row: object) -> int | None:
    if isinstance(row, tuple) and row and isinstance(row[0], int):
        return row[0]
    return None


# Tracebacks show the public path to import and catch, not this private module.
for _cls in (SchemaVersionError, MigrationTimeout):
    _cls.__module__ = "batchy_contrib.jobs.postgres"
