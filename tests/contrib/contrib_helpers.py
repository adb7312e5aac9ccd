"""Helpers shared by the data-source tests (importable: conftest puts this folder on sys.path)."""

from __future__ import annotations

import socket
from typing import Any

from batchy_contrib.sql import mysql


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
