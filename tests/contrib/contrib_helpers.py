"""Helpers shared by the data-source tests (importable: conftest puts this folder on sys.path)."""

from __future__ import annotations

import socket
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
