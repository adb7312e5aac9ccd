"""PostgreSQL and MariaDB restarted under a long-lived, lazily connected database.

The servers are the session's own (``private_postgres``, ``private_mariadb``:
tests/private_servers.py), so the restarts disturb no other test session. One
``Database.from_url`` serves requests (``batchy.run`` each, as a Flask view) and
a long-lived event loop (as an ASGI server) while its server restarts between
requests, during a batch, or is down a while. Then: the batch the restart cut
fails alone, with a ConnectionLostError that names its loader, keys and server;
a request while the server is down fails at once, the same way; the next request
once it is back goes through, in a loop whose pool held connections the restart
ended (they are dropped, never handed to a call); and nothing hangs.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest

import batchy
from batchy.testing import record
from batchy_contrib.errors import ConnectionLostError
from batchy_contrib.sql import mysql, postgres

pytestmark = pytest.mark.timeout(90)

KINDS = ["postgres", "mariadb"]
#: What the loaders' messages call each server.
NAMES = {"postgres": "PostgreSQL", "mariadb": "MySQL"}


class Site:
    """A page's loaders over one lazily connected database, and a table of ten items."""

    def __init__(self, server: Any, kind: str) -> None:
        self.server, self.kind = server, kind
        url = server.dsn if kind == "postgres" else server.url
        self.db: Any = (postgres if kind == "postgres" else mysql).Database.from_url(url)
        self.table = f"items_{uuid.uuid4().hex[:8]}"
        self.items = self.db.one(self.table, name="items")
        # A statement, and a connection, per key: side by side in one round.
        self.each = self.db.one(self.table, name="each", max_batch_size=1)
        sleep = "pg_sleep(1.5)" if kind == "postgres" else "SLEEP(1.5)"
        keys = "= ANY({keys})" if kind == "postgres" else "IN {keys}"
        self.slow = self.db.query(
            f"SELECT id, {sleep} AS s FROM {self.table} WHERE id {keys}",
            key="id",
            name="slow",
            max_batch_size=1,
        )
        batchy.run(self._create())

    async def _create(self) -> None:
        p = self.db.dialect.param
        await self.db.execute(f"CREATE TABLE {self.table} (id INTEGER PRIMARY KEY, label TEXT)")
        await self.db.executemany(
            f"INSERT INTO {self.table} VALUES ({p}, {p})", [(i, f"item{i}") for i in range(10)]
        )

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    async def labels(self, ids: list[int], loader: Any = None) -> list[str]:
        async with batchy.scope():
            rows = await batchy.gather(*((loader or self.items)(i) for i in ids))
        return [r["label"] for r in rows]

    def request(self, ids: list[int]) -> list[str]:
        """One request, in an event loop of its own (``batchy.run``, as a Flask view)."""
        return batchy.run(self.labels(ids))

    def connections(self) -> int:
        """The connections the server lists (other than the one asking)."""
        if self.kind == "postgres":
            import psycopg

            with psycopg.connect(self.server.dsn, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = 'test' AND pid <> pg_backend_pid()"
                ).fetchone()
            return int(row[0]) if row else 0
        import pymysql

        conn = pymysql.connect(host="127.0.0.1", port=self.server.port, user="root")
        with conn, conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = 'test'")
            (count,) = cur.fetchone()
        return int(count)  # (the one asking has no database)


@pytest.fixture(params=KINDS)
def site(request: pytest.FixtureRequest) -> Any:
    return Site(request.getfixturevalue(f"private_{request.param}"), request.param)


def assert_lost(error: BaseException, site: Site, loader: str, keys: list[int]) -> None:
    assert isinstance(error, ConnectionLostError), repr(error)
    assert (error.loader, list(error.keys), error.host) == (loader, keys, site.host)
    message = str(error)
    assert message.startswith(f"loader {loader!r} cannot reach {NAMES[site.kind]} at {site.host} (")
    assert message.endswith(
        f"while loading keys {keys}. Check that the server is running and reachable; "
        "the next call reconnects."
    )


def test_a_restart_between_requests_goes_unnoticed(site: Site) -> None:
    assert site.request([1, 2, 3]) == ["item1", "item2", "item3"]
    site.server.restart()
    with record() as rec:
        assert site.request([1, 2, 3]) == ["item1", "item2", "item3"]
    assert rec.calls("items") == [[1, 2, 3]]


def test_a_request_while_the_server_is_down_fails_at_once_and_the_next_one_reconnects(
    site: Site,
) -> None:
    assert site.request([1]) == ["item1"]
    site.server.stop()
    began = time.monotonic()
    with pytest.raises(ConnectionLostError) as caught:
        site.request([4, 5])
    assert time.monotonic() - began < 2.0
    assert_lost(caught.value, site, "items", [4, 5])
    site.server.start()
    assert site.request([4, 5]) == ["item4", "item5"]


def test_a_restart_during_a_batch_fails_that_batch_only(site: Site) -> None:
    async def page() -> list[Any]:
        async with batchy.scope():
            # One round: the slow batch and the quick one run side by side.
            return await batchy.gather(site.slow(1), site.items(2), return_exceptions=True)

    restart = threading.Timer(0.5, site.server.restart, kwargs={"crash": True})
    if site.kind == "postgres":  # pg_ctl's crash: stop -m immediate
        restart = threading.Timer(0.5, site.server.restart, args=("immediate",))
    restart.start()
    began = time.monotonic()
    with record() as rec:
        slow, quick = batchy.run(page())
    restart.join()
    assert time.monotonic() - began < 5.0
    assert rec.calls("slow") == [[1]] and rec.calls("items") == [[2]]
    assert quick == {"id": 2, "label": "item2"}
    assert_lost(slow, site, "slow", [1])
    assert site.request([1, 2]) == ["item1", "item2"]


async def test_a_long_lived_loop_drops_the_connections_a_restart_ended(site: Site) -> None:
    # Four statements at once leave four connections in this loop's pool; the
    # restart ends them all while they are idle. None may be handed to a call.
    async def busy(ids: list[int]) -> Any:
        async with batchy.scope():
            return await batchy.gather(*(site.slow(i) for i in ids))

    try:
        await busy([0, 1, 2, 3])  # four statements side by side: four connections
        assert site.connections() == 4
        await asyncio.to_thread(site.server.restart)
        await asyncio.sleep(0.1)  # the loop runs on between two requests
        with record() as rec:
            page = await asyncio.wait_for(site.labels([0, 1, 2, 3], site.each), 10)
        assert page == ["item0", "item1", "item2", "item3"]
        assert sorted(rec.calls("each")) == [[0], [1], [2], [3]]  # side by side, none failed
        # Down, then back: the call in between fails at once, the next one connects.
        await asyncio.to_thread(site.server.stop)
        with pytest.raises(ConnectionLostError) as caught:
            await asyncio.wait_for(site.labels([7]), 5)
        assert_lost(caught.value, site, "items", [7])
        await asyncio.to_thread(site.server.start)
        assert await asyncio.wait_for(site.labels([7]), 10) == ["item7"]
        # A restart in the middle of a batch: that batch fails, the next one goes.
        during = asyncio.ensure_future(busy([3]))
        await asyncio.sleep(0.5)
        await asyncio.to_thread(site.server.restart)
        with pytest.raises(ConnectionLostError) as caught:
            await asyncio.wait_for(during, 10)
        assert_lost(caught.value, site, "slow", [3])
        assert await asyncio.wait_for(site.labels([8, 9]), 10) == ["item8", "item9"]
    finally:
        await site.db.close()
