"""Count the statements a PostgreSQL server receives: a proxy in front of it that reads the wire.

PostgreSQL keeps no per-connection statement counter (MySQL's ``Questions``),
``pg_stat_statements`` needs ``shared_preload_libraries`` (a server restart)
and the cumulative statistics reach ``pg_stat_database`` seconds late. So the
blog example, its tests and the benchmarks count on the wire instead: point
the client at :attr:`StatementCounter.port` and every message it sends passes
through here on its way to the server. Each *Execute* message (extended
protocol: psycopg's parameterised statements, prepared or not) and each
*Query* message (simple protocol) is one statement the server runs; *Parse*
and *Bind* tell its text and how many parameters it carried::

    counter = StatementCounter("127.0.0.1", 5432)
    db = postgres.Database.from_url(counter.url("postgresql://postgres@127.0.0.1/test"))
    before = counter.count
    ...                                   # run loaders
    print(counter.count - before, counter.sent[-1])  # statements, and the last one

The proxy runs on a thread of its own, so it serves every event loop (and
sync code) of the process. TLS is not read: :meth:`url` turns it off.
"""

from __future__ import annotations

import asyncio
import collections
import struct
import threading
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["Sent", "StatementCounter"]

_SSL, _GSS, _CANCEL = 80877103, 80877104, 80877102  # untyped requests before the start-up


@dataclass(frozen=True)
class Sent:
    """One statement the server received: its text and the number of bound parameters."""

    sql: str
    params: int
    param_bytes: int


class StatementCounter:
    """A TCP proxy to ``host:port`` on 127.0.0.1 that counts the statements going through it."""

    def __init__(self, host: str = "127.0.0.1", port: int = 5432, *, keep: int = 1000) -> None:
        self.host, self.upstream = host, port
        self._lock = threading.Lock()
        self._count = 0
        self._connections = 0
        self._sent: collections.deque[Sent] = collections.deque(maxlen=keep)
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(started,), name="pg-statements", daemon=True
        )
        self._thread.start()
        started.wait()

    # -- what tests read --------------------------------------------------------

    @property
    def count(self) -> int:
        """Statements received so far (Execute and Query messages), on every connection."""
        with self._lock:
            return self._count

    @property
    def connections(self) -> int:
        """Connections started through the proxy so far (not counting cancel requests)."""
        with self._lock:
            return self._connections

    @property
    def sent(self) -> list[Sent]:
        """The last statements received (up to ``keep``), oldest first."""
        with self._lock:
            return list(self._sent)

    def url(self, url: str) -> str:
        """``url`` pointed at the proxy instead of the server, TLS and GSS encryption off."""
        parts = urlsplit(url)
        user = parts.netloc.rpartition("@")[0]
        netloc = f"{user}@127.0.0.1:{self.port}" if user else f"127.0.0.1:{self.port}"
        query = dict(parse_qsl(parts.query))
        query.update(sslmode="disable", gssencmode="disable")
        return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query)))

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()

    # -- the proxy ----------------------------------------------------------------

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port: int = server.sockets[0].getsockname()[1]
        started.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            self._loop.close()

    async def _serve(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        try:
            server, to_server = await asyncio.open_connection(self.host, self.upstream)
        except OSError:
            to_client.close()
            return
        answers = asyncio.ensure_future(_pipe(server, to_client))
        try:
            await self._read_client(client, to_server)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            to_server.close()
            await asyncio.wait([answers], timeout=5)
            answers.cancel()
            to_client.close()

    async def _read_client(self, client: asyncio.StreamReader, out: asyncio.StreamWriter) -> None:
        while True:  # untyped: SSL / GSS requests (answered 'N' by the server), then start-up
            head = await client.readexactly(8)
            length, code = struct.unpack("!ii", head)
            out.write(head + await client.readexactly(length - 8))
            await out.drain()
            if code == _CANCEL:  # a cancel request comes on a connection of its own
                return
            if code not in (_SSL, _GSS):
                break
        with self._lock:
            self._connections += 1
        statements: dict[bytes, str] = {}  # prepared statement name -> text
        portals: dict[bytes, tuple[str, int, int]] = {}
        while True:
            kind = await client.readexactly(1)
            size = await client.readexactly(4)
            body = await client.readexactly(struct.unpack("!i", size)[0] - 4)
            out.write(kind + size + body)
            await out.drain()
            if kind == b"P":  # Parse: name, text, parameter types
                name, rest = body.split(b"\0", 1)
                statements[name] = rest.split(b"\0", 1)[0].decode()
            elif kind == b"B":  # Bind: portal, statement, formats, parameters
                portal, name, rest = body.split(b"\0", 2)
                portals[portal] = (statements.get(name, "?"), *_parameters(rest))
            elif kind == b"E":  # Execute: portal
                sql, n, size_ = portals.get(body.split(b"\0", 1)[0], ("?", 0, 0))
                self._received(Sent(sql, n, size_))
            elif kind == b"Q":  # a simple query
                self._received(Sent(body.rstrip(b"\0").decode(), 0, 0))
            elif kind == b"X":  # Terminate
                return

    def _received(self, sent: Sent) -> None:
        with self._lock:
            self._count += 1
            self._sent.append(sent)


def _parameters(rest: bytes) -> tuple[int, int]:
    """(count, total bytes) of the parameters of a Bind message, after its two names."""
    (formats,) = struct.unpack_from("!h", rest, 0)
    at = 2 + 2 * formats
    (count,) = struct.unpack_from("!h", rest, at)
    at += 2
    total = 0
    for _ in range(count):
        (size,) = struct.unpack_from("!i", rest, at)
        at += 4 + max(size, 0)
        total += max(size, 0)
    return count, total


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()
