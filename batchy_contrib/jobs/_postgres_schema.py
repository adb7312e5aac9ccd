"""Where the PostgreSQL job store's schema is created, checked against its version, and migrated.

The store calls :func:`ensure_async` (or :func:`ensure_sync` for code without an
event loop) once per connection pool, before its first step. Both run the same
statements, in one transaction under an advisory lock, so processes that start
together create the schema once.
"""

from __future__ import annotations

import re
import zlib

import psycopg

from batchy.jobs import ConfigError

from . import _postgres_sql as ddl

__all__ = ["SchemaVersionError", "Names", "ensure_async", "ensure_sync"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,40}")


class SchemaVersionError(ConfigError):
    """The database holds a job schema of a version this release of batchy cannot use."""


class Names:
    """The SQL spelling of one schema: quoted name, NOTIFY channel, advisory lock space."""

    def __init__(self, schema: str) -> None:
        if not isinstance(schema, str) or not _NAME.fullmatch(schema):
            raise ConfigError(
                f"PostgresBackend(schema={schema!r}): a schema name is a letter or '_' and "
                "up to 40 more letters, digits or '_' (e.g. schema='batchy_jobs')"
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
        """Statements that lock out other creators and make the version table."""
        return [
            f"SELECT pg_advisory_xact_lock({self.setup_lock})",
            f"CREATE SCHEMA IF NOT EXISTS {self.quoted}",
            f"CREATE TABLE IF NOT EXISTS {self.quoted}.version (version int NOT NULL)",
        ]

    def read_version(self) -> str:
        return f"SELECT max(version) FROM {self.quoted}.version"

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


async def ensure_async(conn: psycopg.AsyncConnection[object], names: Names) -> None:
    """Create or migrate the schema through ``conn`` (an autocommit connection)."""
    async with conn.transaction():
        for statement in names.prepare():
            await conn.execute(statement)
        row = await (await conn.execute(names.read_version())).fetchone()
        for statement in names.upgrade(_version(row)):
            await conn.execute(statement)


def ensure_sync(conn: psycopg.Connection[object], names: Names) -> None:
    """:func:`ensure_async` for a blocking connection."""
    with conn.transaction():
        for statement in names.prepare():
            conn.execute(statement)
        row = conn.execute(names.read_version()).fetchone()
        for statement in names.upgrade(_version(row)):
            conn.execute(statement)


def _version(row: object) -> int | None:
    if isinstance(row, tuple) and row and isinstance(row[0], int):
        return row[0]
    return None
