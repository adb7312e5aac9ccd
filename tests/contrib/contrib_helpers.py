"""Helpers shared by the data-source tests (importable: conftest puts this folder on sys.path)."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

from pg_statements import StatementCounter

from batchy_contrib.sql import mysql, postgres

#: The PostgreSQL server of the tests, and the proxy in front of it that counts the
#: statements it receives (started on first use; one per test session).
PG_HOST, PG_PORT = "127.0.0.1", 5432
_PG_COUNTER: list[StatementCounter] = []


def pg_counter() -> StatementCounter:
    if not _PG_COUNTER:
        _PG_COUNTER.append(StatementCounter(PG_HOST, PG_PORT))
    return _PG_COUNTER[0]


def pg_url(database: str, *, counted: bool = True, **options: str) -> str:
    """A URL of the test server's ``database``, through the counting proxy unless not ``counted``."""
    query = "&".join(f"{k}={v}" for k, v in options.items())
    url = f"postgresql://postgres@{PG_HOST}:{PG_PORT}/{database}" + (f"?{query}" if query else "")
    return pg_counter().url(url) if counted else url


class Statements:
    """SQLite's trace callback, counting statements."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, statement: str) -> None:
        self.seen.append(statement)

    @property
    def count(self) -> int:
        return len(self.seen)


async def statements(db: Any) -> int:
    """Statements the database has run so far, counted by the database itself."""
    if isinstance(db, mysql.Database):
        return await db.questions()
    if isinstance(db, postgres.Database):  # through the proxy: what the server received
        assert db.host.endswith(f":{pg_counter().port}"), f"{db.host} is not behind the proxy"
        return pg_counter().count
    return int(db.trace.count)


async def running(url: str, session: int, marker: str) -> None:
    """Waits (up to 10 s) until ``session`` of the server at ``url`` (a MySQL connection
    id, a PostgreSQL backend pid) runs a statement that contains ``marker``.

    Killed or cancelled before it began, a statement runs to its end: a fixed sleep
    before the kill lost that race on a busy machine.
    """
    if url.startswith("mysql"):
        admin: Any = await mysql.connect(url, minsize=1, maxsize=1)
        query = (
            "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST "
            "WHERE ID = %s AND INFO LIKE %s"
        )
    else:
        admin = await postgres.connect(url, max_size=1)
        query = (
            "SELECT count(*) AS n FROM pg_stat_activity "
            "WHERE pid = %s AND state = 'active' AND query LIKE %s"
        )
    deadline = time.monotonic() + 10
    try:
        while not (await admin.fetch(query, (session, f"%{marker}%")))[0]["n"]:
            assert time.monotonic() < deadline, f"session {session} never ran {marker!r}"
            await asyncio.sleep(0.01)
    finally:
        await admin.close()


async def traced(trace: Statements, marker: str) -> None:
    """Waits (up to 10 s) until SQLite began a statement that contains ``marker``
    (its trace callback runs as a statement begins: ``interrupt()`` reaches it)."""
    deadline = time.monotonic() + 10
    while not any(marker in statement for statement in trace.seen):
        assert time.monotonic() < deadline, f"SQLite never began {marker!r}"
        await asyncio.sleep(0.01)


def closed_port() -> int:
    """A TCP port on 127.0.0.1 where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Blackhole:
    """A hung server: a listening socket nobody reads (connections open, nothing answers)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)  # the kernel completes handshakes; nothing ever answers
        self.port = int(self.sock.getsockname()[1])

    def close(self) -> None:
        self.sock.close()
