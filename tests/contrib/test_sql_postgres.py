"""What the PostgreSQL loaders send: one statement per batch with the keys as one array parameter.

The shared suites (test_sql_backends, _matching, _keys, _errors, _lazy, _loops)
run on PostgreSQL too; this file holds what only PostgreSQL does. Statements
are counted on the wire by the proxy in front of the server
(examples/blog/pg_statements.py): what the server received, with its text and
number of parameters.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import uuid
import warnings
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from contrib_helpers import pg_counter
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import batchy
from batchy.testing import record
from batchy_contrib.sql import postgres
from batchy_contrib.sql.postgres import KeyEncodingError, KeyTypeWarning


async def make(
    db: postgres.Database, table: str, columns: str, rows: list[tuple[Any, ...]]
) -> None:
    await db.execute(f"DROP TABLE IF EXISTS {table}")
    await db.execute(f"CREATE TABLE {table} ({columns})")
    if rows:
        marks = ", ".join(["%s"] * len(rows[0]))
        await db.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)


async def load_all(loader: batchy.Loader[Any, Any], keys: list[Any]) -> list[Any]:
    async with batchy.scope():
        return await batchy.gather(*(loader(k) for k in keys), return_exceptions=True)


class Received:
    """The statements the server receives inside the block (through the proxy)."""

    def __enter__(self) -> Received:
        self._start = pg_counter().count
        return self

    def __exit__(self, *exc: object) -> None:
        n = pg_counter().count - self._start
        self.statements = pg_counter().sent[-n:] if n else []


# -- one statement, one array parameter ---------------------------------------------


async def test_a_batch_is_one_statement_with_the_keys_as_one_array(
    postgres_db: postgres.Database,
) -> None:
    await make(postgres_db, "items", "id INTEGER PRIMARY KEY, label TEXT", [(1, "a"), (2, "b")])
    items = postgres_db.one("items")
    with Received() as first:
        assert await load_all(items, [2, 3, 1]) == [
            {"id": 2, "label": "b"},
            None,
            {"id": 1, "label": "a"},
        ]
    (sent,) = first.statements
    assert sent.params == 1  # three keys, one parameter
    assert sent.sql == (
        "SELECT k.batchy__pos - 1 AS batchy__pos, t.* FROM unnest(COALESCE($1, ARRAY(SELECT "
        't0."id" FROM "items" AS t0 LIMIT 0))) WITH ORDINALITY AS k(batchy__key, batchy__pos) '
        'JOIN "items" AS t ON t."id" = k.batchy__key'
    )
    # Int keys, a column seen to hold ints: no positions, the array alone.
    with Received() as second:
        await load_all(items, [1, 2])
    assert [(s.sql, s.params) for s in second.statements] == [
        ('SELECT t.* FROM "items" AS t WHERE t."id" = ANY($1)', 1)
    ]


async def test_fifty_thousand_keys_are_one_short_statement(postgres_db: postgres.Database) -> None:
    await postgres_db.execute("DROP TABLE IF EXISTS many_items")
    await postgres_db.execute(
        "CREATE TABLE many_items AS SELECT i AS id, 'n' || i AS name FROM generate_series(1, 60000) i"
    )
    await postgres_db.execute("ALTER TABLE many_items ADD PRIMARY KEY (id)")
    by_name = postgres_db.one("many_items", "name", columns=["id"])
    keys = [f"n{i}" for i in range(10_001, 60_001)]
    with record() as rec, Received() as got:
        rows = await load_all(by_name, keys)
    assert rec.calls(by_name) == [keys]  # the default batch size takes them all
    assert [r["id"] for r in rows] == list(range(10_001, 60_001))
    (sent,) = got.statements
    assert sent.params == 1 and len(sent.sql) < 300  # the same text as for one key
    assert sent.param_bytes > 50_000 * 6  # every key went, in that one parameter


async def test_query_binds_the_keys_as_one_array(postgres_db: postgres.Database) -> None:
    await make(
        postgres_db, "pets", "id INTEGER PRIMARY KEY, owner INTEGER", [(1, 7), (2, 7), (3, 8)]
    )
    counts = postgres_db.query(
        "SELECT owner, COUNT(*) AS n FROM pets WHERE owner IN {keys} GROUP BY owner",
        key="owner",
        row=lambda owner, n: n,
    )
    per_key = postgres_db.query(  # {keys} as the array itself, typed by the statement
        "SELECT k.id AS owner, COUNT(pets.id) AS n FROM unnest({keys}::int[]) AS k(id)"
        " LEFT JOIN pets ON pets.owner = k.id GROUP BY k.id",
        key="owner",
        row=lambda owner, n: n,
    )
    strays = postgres_db.query(  # NOT IN: rows whose owner is none of the keys
        "SELECT owner, id FROM pets WHERE owner NOT IN {keys}", key="owner", many=True
    )
    with Received() as got:
        assert await load_all(counts, [7, 8, 9]) == [2, 1, None]
    ((sql, params),) = [(s.sql, s.params) for s in got.statements]
    assert sql.endswith("WHERE owner = ANY($1) GROUP BY owner") and params == 1
    assert await load_all(per_key, [7, 9]) == [2, 0]
    with Received() as got:
        assert await load_all(strays, [7]) == [[]]  # owner 8's row is no key's
    assert got.statements[0].sql == "SELECT owner, id FROM pets WHERE owner <> ALL($1)"


async def test_a_prepared_statement_serves_batches_of_every_size(
    postgres_db: postgres.Database,
) -> None:
    # psycopg prepares a statement it has run 5 times: the array keeps one text.
    await make(postgres_db, "items", "id INTEGER PRIMARY KEY, label TEXT", [(1, "a"), (2, "b")])
    items = postgres_db.one("items", columns=["label"])
    for keys in ([1], [1, 2], [2, 9, 1], [9], [1, 2], list(range(1000)), [2], ["1"]):
        got = await load_all(items, keys)
        assert got == [
            {"label": "ab"[k - 1], "id": k} if k in (1, 2) else None for k in map(int, keys)
        ]


# -- keys are read as the column's type, under its collation ---------------------------


@pytest.mark.parametrize(
    ("column", "ada", "trail"),
    [
        ("citext", ["ada", "Ada", "ADA"], []),  # case-insensitive
        ("VARCHAR(20) COLLATE batchy_ci", ["ada", "Ada", "ADA"], []),  # ICU: case only
        ("VARCHAR(20) COLLATE batchy_ci_ai", ["ada", "Ada", "ADA"], ["traíl"]),  # and accents
        ("VARCHAR(20)", ["ADA"], []),  # the database's default: exact
    ],
)
async def test_duplicate_keys_under_a_collation_in_one_batch(
    postgres_db: postgres.Database, column: str, ada: list[str], trail: list[str]
) -> None:
    await make(
        postgres_db,
        "names",
        f"id INTEGER PRIMARY KEY, name {column}",
        [(1, "ada"), (2, "Ada"), (3, "ADA"), (4, "traíl")],
    )
    by_name = postgres_db.many("names", "name", order_by="id", row=lambda id, name: name)
    keys = ["ADA", "ada", "aDa", "trail", "TRAIL"]
    with record() as rec, Received() as got:
        rows = await load_all(by_name, keys)
    assert rec.calls(by_name) == [keys] and len(got.statements) == 1
    assert rows == [
        ada if "COLLATE" in column or column == "citext" else ["ADA"],
        ada if "COLLATE" in column or column == "citext" else ["ada"],
        ada if "COLLATE" in column or column == "citext" else [],
        trail,
        trail,
    ]
    for key, found in zip(keys, rows, strict=True):  # what WHERE name = 'key' says
        alone = await postgres_db.fetch("SELECT name FROM names WHERE name = %s ORDER BY id", [key])
        assert [r["name"] for r in alone] == found, key


async def test_keys_of_other_types_are_read_as_the_columns_type(
    postgres_db: postgres.Database,
) -> None:
    ids = [uuid.UUID(int=1), uuid.UUID(int=2)]
    await make(
        postgres_db,
        "tokens",
        "id uuid PRIMARY KEY, code TEXT, n NUMERIC",
        [(ids[0], str(ids[0]), 7), (ids[1], "x", 2.5)],
    )
    by_id = postgres_db.one("tokens", columns=["n"])
    by_code = postgres_db.one("tokens", "code", columns=["n"])
    by_n = postgres_db.one("tokens", "n", columns=["code"])
    # A UUID key, or its text; a UUID against a text column (its dashed text); numbers.
    assert [r and r["n"] for r in await load_all(by_id, [ids[0], str(ids[1]), uuid.uuid4()])] == [
        7,
        2.5,
        None,
    ]
    assert (await load_all(by_code, [ids[0]]))[0]["code"] == str(ids[0])
    with Received() as got:
        found = await load_all(by_n, [7, "2.50", 2.5, None])
    assert [r and r["code"] for r in found] == [str(ids[0]), "x", "x", None]
    assert len(got.statements) == 1  # keys of four types, one array


async def test_a_key_the_server_cannot_read_fails_alone(postgres_db: postgres.Database) -> None:
    await make(postgres_db, "items", "id INTEGER PRIMARY KEY, label TEXT", [(1, "a"), (2, "b")])
    items = postgres_db.one("items", columns=["label"])
    keys = [1, "x", 2, 2**40, *range(3, 20)]
    with record() as rec, Received() as got:
        rows = await load_all(items, keys)
    assert rec.calls(items) == [keys]  # they joined one batch
    assert rows[0] == {"label": "a", "id": 1} and rows[2] == {"label": "b", "id": 2}
    assert rows[4:] == [None] * 17
    bad, big = rows[1], rows[3]
    assert isinstance(bad, KeyEncodingError) and bad.keys == ["x"]
    assert str(bad) == (
        f"loader 'items_by_id' could not send key 'x' (str) to PostgreSQL at {postgres_db.host}: "
        "the server cannot read it as a value of the column it is compared with "
        '(InvalidTextRepresentation: invalid input syntax for type integer: "x"). Only this key '
        "failed; the other keys of its batch were loaded. Pass keys of the column's type."
    )
    assert isinstance(big, KeyEncodingError) and "NumericValueOutOfRange" in str(big)
    # The failed statement, probes that run nothing (LIMIT 0; one of them with no
    # key, to tell a statement that fails by itself), the statement again.
    first, *probes, last = got.statements
    assert len(probes) <= 2 * 6 + 1
    assert all(p.sql.endswith(") AS batchy__probe LIMIT 0") for p in probes)
    assert last.sql == first.sql and last.params == 1


async def test_a_key_with_nul_fails_alone_before_anything_is_sent(
    postgres_db: postgres.Database,
) -> None:
    await make(postgres_db, "names", "id INTEGER PRIMARY KEY, name TEXT", [(1, "ada")])
    by_name = postgres_db.one("names", "name", columns=["id"])
    with Received() as got:
        bad, ada = await load_all(by_name, ["a\x00", "ada"])
    assert ada == {"id": 1, "name": "ada"} and len(got.statements) == 1
    assert isinstance(bad, KeyEncodingError)
    assert str(bad) == (
        f"loader 'names_by_name' could not encode key 'a\\x00' (str) for PostgreSQL at "
        f"{postgres_db.host} (DataError: PostgreSQL text fields cannot contain NUL (0x00) "
        "bytes). Only this key failed; the other keys of its batch were loaded. Pass a value "
        "the driver can encode: text without NUL characters or lone surrogates."
    )


async def test_keys_of_a_type_psycopg_cannot_adapt_fail_alone(
    postgres_db: postgres.Database,
) -> None:
    await make(postgres_db, "items", "id INTEGER PRIMARY KEY", [(1,)])
    items = postgres_db.one("items")
    thing = object()
    with Received() as got:
        one, bad, listed = await load_all(items, [1, thing, (1, 2)])
    assert one == {"id": 1} and len(got.statements) == 1
    for error in (bad, listed):
        assert isinstance(error, KeyEncodingError)
        assert (
            "its driver binds only keys of type None, int, float, str, bytes, Decimal, UUID, "
            in (str(error))
        )


async def test_a_query_with_keys_of_another_type_warns(postgres_db: postgres.Database) -> None:
    await make(postgres_db, "nums", "id INTEGER PRIMARY KEY, label TEXT", [(1, "one"), (2, "two")])
    labels = postgres_db.query("SELECT id, label FROM nums WHERE id IN {keys}", key="id")
    with pytest.warns(KeyTypeWarning, match="keys of type str"):
        # The server finds '1' (it reads the key as an integer); Python matches 1 != '1'.
        assert await load_all(labels, ["1", 2]) == [None, {"id": 2, "label": "two"}]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert await load_all(postgres_db.one("nums"), ["1"]) == [{"id": 1, "label": "one"}]


# -- connections -------------------------------------------------------------------------


async def test_a_pool_with_autocommit_off_is_refused(postgres_url: str) -> None:
    from psycopg_pool import AsyncConnectionPool

    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(postgres_url, min_size=1, open=False)
    await pool.open()
    db = postgres.Database(pool)
    try:
        with Received() as got, pytest.raises(batchy.LoaderError) as info:
            async with batchy.scope():
                await db.one("items")(1)
    finally:
        await pool.close()
    assert got.statements == []
    assert str(info.value) == (
        f"loader 'items_by_id' raised UsageError: the psycopg pool for {db.host} serves "
        "connections with autocommit off: each batch call would send BEGIN and leave a "
        "transaction for the pool to roll back. Create the pool with "
        "kwargs={'autocommit': True} (batchy_contrib.sql.postgres.connect does) while "
        "loading keys [1]"
    )


async def test_a_connection_or_a_blocking_pool_is_refused_at_once(postgres_url: str) -> None:
    # Database(conn) was accepted and failed at the first loader call as "failed on
    # PostgreSQL at ? (AttributeError: 'AsyncConnection' object has no attribute
    # 'getconn')"; a blocking pool, as a TypeError of an await.
    import psycopg
    from psycopg_pool import ConnectionPool

    conn = await psycopg.AsyncConnection.connect(postgres_url, autocommit=True)
    blocking: ConnectionPool[Any] = ConnectionPool(postgres_url, open=False)
    try:
        for wrong in (conn, blocking, "postgresql://db/app"):
            with pytest.raises(batchy.UsageError) as info:
                postgres.Database(wrong)
            assert str(info.value) == (
                "postgres.Database() takes a psycopg_pool.AsyncConnectionPool, got "
                f"{type(wrong).__name__}: the batches of a round run in parallel, each on a "
                "connection of its own. Use postgres.Database.from_url(url) (a pool per event "
                "loop, opened on first use) or await postgres.connect(url), or wrap an "
                "AsyncConnectionPool(url, kwargs={'autocommit': True})"
            )
    finally:
        await conn.close()


def test_from_url_wants_a_postgresql_url() -> None:
    with pytest.raises(batchy.UsageError) as info:
        postgres.Database.from_url("mysql://root@127.0.0.1/test")
    assert str(info.value) == (
        "postgres.Database.from_url() takes a URL like "
        "'postgresql://user:password@host:5432/database', got 'mysql://root@127.0.0.1/test'"
    )


# -- the property: each key gets what WHERE id = '<key>' alone gives, or fails alone -------

KEYS = st.lists(
    st.one_of(
        st.integers(min_value=-3, max_value=12),
        st.integers(min_value=2**31, max_value=2**40),  # out of the column's range
        st.sampled_from(["1", "07", " 3 ", "+4", "x", "", "1.0", "2e0", "\u0661"]),
        st.none(),
    ),
    max_size=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(keys=KEYS)
def test_each_key_gets_what_the_server_reads_it_as_alone(
    postgres_url: str, keys: list[Any]
) -> None:
    async def check(db: postgres.Database) -> None:
        await make(db, "nums", "id INTEGER PRIMARY KEY", [(i,) for i in range(10)])
        nums = db.one("nums")
        got = await load_all(nums, keys)
        for key, value in zip(keys, got, strict=True):
            try:  # the key alone, as the server reads a literal: WHERE id = '<key>'
                alone = await db.fetch(
                    "SELECT id FROM nums WHERE id = %s", [None if key is None else str(key)]
                )
            except psycopg.DataError:
                assert isinstance(value, KeyEncodingError) and value.keys == [key], key
                continue
            assert value == (alone[0] if alone else None), key

    on_a_new_pool(postgres_url, check)


def on_a_new_pool(url: str, check: Callable[[postgres.Database], Awaitable[None]]) -> None:
    """Run ``check`` in a loop of its own (hypothesis calls a sync test) on a new small pool."""

    async def run() -> None:
        db = await postgres.connect(url, max_size=2)
        try:
            await check(db)
        finally:
            await db.close()

    asyncio.run(run())


async def test_a_full_pool_makes_batches_wait_and_loses_no_connection(postgres_url: str) -> None:
    db = await postgres.connect(postgres_url, max_size=1, timeout=0.5)
    await make(db, "items", "id INTEGER PRIMARY KEY, label TEXT", [(1, "a"), (2, "b")])
    items, labels = db.one("items"), db.many("items", "label")
    opened = pg_counter().connections
    # Two batches of one round, one connection: the second waits for the first.
    assert await load_all(items, [1]) == [{"id": 1, "label": "a"}]
    async with batchy.scope():
        assert await batchy.gather(items(2), labels("a")) == [
            {"id": 2, "label": "b"},
            [{"id": 1, "label": "a"}],
        ]
    # One batch holds the connection past the timeout, one waits for it past the timeout.
    slow = db.query("SELECT id, pg_sleep(2) AS z FROM items WHERE id IN {keys}", key="id")
    async with batchy.scope():
        results = await batchy.gather(slow(1), items(9), return_exceptions=True)
    assert [type(r).__name__ for r in results] == ["QueryInterruptedError"] * 2
    # The one that never had a connection says so, not that its statement was cancelled.
    held, waited = (str(r) for r in results)
    assert "got no answer from PostgreSQL" in held and "the statement was cancelled" in held
    assert waited.startswith(
        f"loader 'items_by_id' got no connection to PostgreSQL at {db.host} within 0.5 s while "
        "loading keys [9]: the pool had none free"
    )
    assert "statement" not in waited and "raise the pool's max_size" in waited
    assert await load_all(items, [2]) == [{"id": 2, "label": "b"}]
    assert pg_counter().connections == opened  # the one connection served every batch
    await db.close()


# -- a table changed by a migration, connections the server ended ------------------------


def _admin(url: str, sql: str) -> Any:
    """Run ``sql`` on a connection of its own, as a migration or an operator would."""
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(sql)
        return cur.fetchall() if cur.description is not None else None


async def test_a_table_changed_under_a_prepared_statement_is_planned_afresh(
    postgres_url: str,
) -> None:
    db = await postgres.connect(postgres_url, max_size=1)
    try:
        await make(db, "items", "id INTEGER PRIMARY KEY, label TEXT", [(1, "a"), (2, "b")])
        items, labels = db.one("items"), db.many("items", "label", name="by_label")
        for _ in range(8):  # psycopg prepares a statement after its fifth run
            await load_all(items, [1, 2])
            await load_all(labels, ["a"])
        assert any(
            "ANY" in r["statement"]
            for r in await db.fetch("SELECT statement FROM pg_prepared_statements")
        )
        # A migration on another connection: every prepared SELECT t.* changes its columns.
        await asyncio.to_thread(_admin, postgres_url, "ALTER TABLE items ADD COLUMN note TEXT")
        for _ in range(2):
            assert await load_all(items, [2, 1]) == [
                {"id": 2, "label": "b", "note": None},
                {"id": 1, "label": "a", "note": None},
            ]
            assert await load_all(labels, ["a"]) == [[{"id": 1, "label": "a", "note": None}]]
        await asyncio.to_thread(_admin, postgres_url, "ALTER TABLE items ALTER label TYPE int "
                                "USING length(label)")  # fmt: skip
        assert await load_all(items, [1]) == [{"id": 1, "label": 1, "note": None}]
    finally:
        await db.close()


async def test_a_key_column_whose_type_changed_under_a_prepared_statement_is_read_afresh(
    postgres_url: str,
) -> None:
    # The prepared statement keeps the array type it was planned with (date[]); once
    # the column is text, COALESCE cannot make one of the two, and every call on the
    # connection failed with CannotCoerce.
    db = await postgres.connect(postgres_url, max_size=1)
    try:
        await make(db, "days", "id INTEGER PRIMARY KEY, day DATE", [(1, "2024-01-01")])
        by_day = db.one("days", "day")
        for _ in range(7):  # psycopg prepares a statement after its fifth run
            await load_all(by_day, ["2024-01-01"])
        await asyncio.to_thread(_admin, postgres_url, "ALTER TABLE days ALTER day TYPE text")
        for _ in range(2):
            assert await load_all(by_day, ["2024-01-01"]) == [{"id": 1, "day": "2024-01-01"}]
    finally:
        await db.close()


async def test_connections_the_server_ended_while_idle_fail_no_call(postgres_url: str) -> None:
    # A server restart, a failover or idle_session_timeout ends every idle connection.
    db = await postgres.connect(postgres_url + "&application_name=batchy_idle_test", max_size=4)
    try:
        await make(db, "items", "id INTEGER PRIMARY KEY, label TEXT", [(1, "a"), (2, "b")])
        loaders = [db.one("items"), db.one("items", "label"), db.many("items", "label")]
        async with batchy.scope():  # three batches at once: three connections
            await batchy.gather(*(loader(1 if i == 0 else "a") for i, loader in
                                  enumerate(loaders)))  # fmt: skip
        ended = await asyncio.to_thread(
            _admin,
            postgres_url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'batchy_idle_test'",
        )
        assert len(ended) >= 2
        await asyncio.sleep(0.2)
        for _ in range(5):
            assert await load_all(loaders[0], [2]) == [{"id": 2, "label": "b"}]
    finally:
        await db.close()


# -- keys a domain refuses, statements that fail by themselves ---------------------------


async def test_a_key_the_columns_domain_refuses_has_no_row(postgres_db: postgres.Database) -> None:
    # As WHERE sku = 'abc1' finds nothing: the column cannot hold it. Before, the
    # domain's CHECK failed the whole batch, the other keys with it.
    db = postgres_db
    await db.execute("DROP TABLE IF EXISTS skus")
    await db.execute("DROP DOMAIN IF EXISTS sku_code")
    await db.execute("DROP DOMAIN IF EXISTS mail")
    await db.execute("CREATE DOMAIN sku_code AS text CHECK (VALUE ~ '^[A-Z]{3}[0-9]$')")
    await db.execute("CREATE DOMAIN mail AS text NOT NULL")
    await make(db, "skus", "id INTEGER PRIMARY KEY, sku sku_code, owner mail",
               [(1, "ABC1", "a@x"), (2, "XYZ9", "a@x")])  # fmt: skip
    by_sku = db.one("skus", "sku", columns=["id"])
    by_owner = db.many("skus", "owner", columns=["id"], order_by="id")
    with record() as rec:
        assert await load_all(by_sku, ["ABC1", "abc1", "XYZ9"]) == [
            {"id": 1, "sku": "ABC1"},
            None,
            {"id": 2, "sku": "XYZ9"},
        ]
        assert await load_all(by_owner, ["a@x", None, "b@x"]) == [
            [{"id": 1, "owner": "a@x"}, {"id": 2, "owner": "a@x"}],
            [],
            [],
        ]
    assert rec.calls(by_sku) == [["ABC1", "abc1", "XYZ9"]]
    assert await db.fetch("SELECT id FROM skus WHERE sku = %s", ["abc1"]) == []


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id, label FROM items WHERE id IN {keys};",
        "SELECT id, label FROM items WHERE id IN {keys} ; ;\n",
        "SELECT id, label FROM items WHERE id IN {keys} -- labels by id",
    ],
)
async def test_a_bad_key_fails_alone_whatever_the_statement_ends_with(
    postgres_db: postgres.Database, sql: str
) -> None:
    await make(postgres_db, "items", "id INTEGER PRIMARY KEY, label TEXT", [(1, "a"), (2, "b")])
    labels = postgres_db.query(sql, key="id", name="labels")
    async with batchy.scope():
        got = await batchy.gather(labels(1), labels("x"), labels(2), return_exceptions=True)
    assert got[0] == {"id": 1, "label": "a"} and got[2] == {"id": 2, "label": "b"}
    assert isinstance(got[1], KeyEncodingError) and got[1].keys == ["x"]


async def test_a_statement_that_fails_by_itself_blames_no_key(
    postgres_db: postgres.Database,
) -> None:
    await make(postgres_db, "items", "id INTEGER PRIMARY KEY, label TEXT", [(1, "a"), (2, "b")])
    recent = postgres_db.query(
        "SELECT id FROM items WHERE id IN {keys} AND now() > '2024-02-30'::date", key="id",
        name="recent",
    )  # fmt: skip
    with Received() as sent:
        got = await load_all(recent, list(range(1, 65)))
    errors = {type(e).__name__ for e in got}
    assert errors == {"QueryRejectedError"}, errors
    assert "2024-02-30" in str(got[0]) and "keys [1, 2, 3" in str(got[0])
    # The statement, a probe with every key, one with none: not two probes per key.
    assert len(sent.statements) == 3


async def test_a_waiter_handed_the_right_to_connect_passes_it_on(postgres_url: str) -> None:
    from batchy_contrib.sql._postgres_pools import Pool

    pool = Pool(postgres_url, max_size=1, kwargs={"autocommit": True})
    first = await pool.getconn()
    second = asyncio.create_task(pool.getconn())
    third = asyncio.create_task(pool.getconn())
    await asyncio.sleep(0.05)
    await first.close()
    await pool.putconn(first)  # its place is free: the second may connect...
    second.cancel()  # ...but its own time limit ends it first
    conn = await asyncio.wait_for(third, 5)  # before: waited for ever
    assert second.cancelled()
    await pool.putconn(conn)
    await pool.close()


async def test_a_connect_cut_short_closes_its_socket_though_its_error_is_kept() -> None:
    # A batch's time limit ends a connect halfway (server slow to answer). psycopg
    # keeps the half-made connection in its frame, which the error's traceback
    # holds; a loader's failure keeps that error, so the server kept a connection
    # slot per such call until the garbage collector came by.
    import socket

    from batchy_contrib.sql._postgres_pools import Pool

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = server.getsockname()[1]
        url = f"postgresql://nobody@127.0.0.1:{port}/x?sslmode=disable"
        pool = Pool(url, max_size=1, kwargs={"autocommit": True})
        with pytest.raises(TimeoutError) as kept:
            async with asyncio.timeout(0.3):
                await pool.getconn()
        accepted, _ = server.accept()
        with accepted:
            accepted.settimeout(5)
            while accepted.recv(4096):  # the startup packet, then the end of the stream
                pass
        assert kept.value is not None
        await pool.close()


# -- the property: keys Python calls equal each get what they get alone --------------------

MIXED = st.lists(
    st.one_of(
        st.integers(min_value=0, max_value=3),
        st.sampled_from([0.0, -0.0, 1.0, 1.5, True, False]),
        st.sampled_from([decimal.Decimal(t) for t in ("1", "1.0", "1.00", "0E+2")]),
        st.sampled_from(["1", "1.0", "t", "0"]),
    ),
    max_size=8,
)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(keys=MIXED)
def test_keys_equal_in_python_each_get_what_they_get_alone(
    postgres_url: str, keys: list[Any]
) -> None:
    async def check(db: postgres.Database) -> None:
        codes = ["0", "1", "1.0", "1.00", "1.5", "t", "f", "-0", "0E+2", "2", "3"]
        await make(db, "codes", "code TEXT PRIMARY KEY", [(c,) for c in codes])
        await make(db, "nums", "id INTEGER PRIMARY KEY", [(i,) for i in range(4)])
        for loader in (db.one("codes", "code"), db.one("nums")):
            together = await load_all(loader, keys)
            for key, value in zip(keys, together, strict=True):
                (alone,) = await load_all(loader, [key])
                if isinstance(alone, Exception):
                    assert type(value) is type(alone) and value.keys == [key], key
                else:
                    assert value == alone, (key, keys)

    on_a_new_pool(postgres_url, check)


async def test_a_connection_with_a_high_descriptor_is_reused(postgres_url: str) -> None:
    # A busy server process has more than 1,024 files open; select() cannot watch a
    # descriptor past that, and a check that leaned on it dropped every connection.
    import os
    import resource

    from batchy_contrib.sql._postgres_pools import Pool

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.fail(f"the test needs 1,200 open files; this machine allows {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        pool = Pool(postgres_url, max_size=1, kwargs={"autocommit": True})
        first = await pool.getconn()
        assert first.pgconn.socket > 1024
        await pool.putconn(first)
        again = await pool.getconn()
        assert again is first
        await pool.putconn(again)
        await pool.close()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# -- the property: the pool never strands a waiter while it has room ------------------------

POOL_STEPS = st.lists(
    st.tuples(st.sampled_from(["get", "put", "break", "cancel"]), st.integers(0, 3), st.booleans()),
    max_size=20,
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@example(size=1, steps=[("get", 0, True)] * 3 + [("break", 0, False), ("cancel", 0, True)])
@given(size=st.integers(1, 2), steps=POOL_STEPS)
def test_a_pool_never_strands_a_waiter(
    postgres_url: str, size: int, steps: list[tuple[str, int, bool]]
) -> None:
    from batchy_contrib.sql._postgres_pools import Pool

    async def run() -> None:
        pool = Pool(postgres_url, max_size=size, kwargs={"autocommit": True})
        asks: list[asyncio.Task[Any]] = []  # getconn calls, pending or done
        held: list[Any] = []
        for op, i, settle in steps:
            if op == "get":
                asks.append(asyncio.ensure_future(pool.getconn()))
            elif op == "cancel" and asks:
                asks[i % len(asks)].cancel()
            elif op in ("put", "break") and held:
                conn = held.pop(i % len(held))
                if op == "break":
                    await conn.close()  # its statement lost the server
                await pool.putconn(conn)
            if not settle:  # the next step comes before the waiters run
                continue
            await asyncio.sleep(0.05)  # (a connection is made within that)
            for ask in asks:
                if ask.done() and not ask.cancelled() and ask.result() not in held:
                    held.append(ask.result())
            asks = [a for a in asks if not a.done()]
            assert len(pool._all) + pool._opening <= size
        # Give everything back: every ask still waiting gets a connection.
        await asyncio.sleep(0.01)
        for ask in asks:
            if ask.done() and not ask.cancelled() and ask.result() not in held:
                held.append(ask.result())
        asks = [a for a in asks if not a.done()]
        while asks or held:  # each connection given back goes to the next ask
            for conn in held:
                await pool.putconn(conn)
            held = []
            if asks:
                done, pending = await asyncio.wait(
                    asks, timeout=3, return_when=asyncio.FIRST_COMPLETED
                )
                assert done, f"{len(pending)} ask(s) stranded"
                held = [a.result() for a in done if not a.cancelled()]
                asks = list(pending)
        await pool.close()

    asyncio.run(run())


# -- passwords stay out of messages; a pool that fails to open leaves nothing open ------


async def test_no_error_shows_the_password_of_the_databases_url(postgres_url: str) -> None:
    # A closed pool's message named the whole URL, password included, in the error
    # every call after close() gets (and logs and error pages show).
    parts = urlsplit(postgres_url)
    secret = "S3cretPassw0rd"
    host = parts.netloc.rpartition("@")[2]
    url = urlunsplit(parts._replace(netloc=f"{parts.username}:{secret}@{host}"))
    db = await postgres.connect(url, max_size=1)
    await make(db, "items", "id INTEGER PRIMARY KEY, label TEXT", [(1, "a")])
    items = db.one("items")
    await db.close()
    (error,) = await load_all(items, [1])
    assert isinstance(error, postgres.ConnectionLostError)
    assert secret not in str(error) and host in str(error)
    for bad in (f"postgresql+psycopg://app:{secret}@db/app", f"http://app:{secret}@db/app"):
        with pytest.raises(batchy.UsageError) as refused:
            postgres.Database.from_url(bad)
        assert secret not in str(refused.value) and "app:***@db" in str(refused.value)


async def test_a_pool_that_fails_to_open_closes_the_connections_it_made(
    postgres_url: str,
) -> None:
    # The min_size connections made before one failed stayed open until garbage
    # collection, holding the server's slots: the next request failed for want of one.
    role = f"rv_{uuid.uuid4().hex[:8]}"
    _admin(postgres_url, f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 1")
    parts = urlsplit(postgres_url)
    url = urlunsplit(parts._replace(netloc=f"{role}@{parts.netloc.rpartition('@')[2]}"))
    try:
        with pytest.raises(psycopg.OperationalError, match="too many connections"):
            await postgres.connect(url, min_size=2, max_size=2)
        live = _admin(
            postgres_url, f"SELECT count(*) FROM pg_stat_activity WHERE usename = '{role}'"
        )
        assert live == [(0,)]
        db = await postgres.connect(url, min_size=1, max_size=1)  # the slot is free
        await db.close()
    finally:
        _admin(postgres_url, f"DROP ROLE {role}")


async def test_an_aware_key_against_a_timestamp_column_fails_alone_saying_why(
    postgres_db: postgres.Database,
) -> None:
    noon = datetime.datetime(2024, 1, 1, 12)
    await make(postgres_db, "stamps", "id INT PRIMARY KEY, at TIMESTAMP", [(1, noon)])
    stamps = postgres_db.one("stamps", "at")
    aware = noon.replace(tzinfo=datetime.timezone(datetime.timedelta(hours=5)))
    late = datetime.datetime(2024, 1, 1, 12, 0, 1)
    error, row, none = await load_all(stamps, [aware, noon, late])
    assert isinstance(error, KeyEncodingError) and error.keys == [aware]
    assert str(error).startswith("loader 'stamps_by_at' could not send key datetime.datetime(")
    assert f"to PostgreSQL at {postgres_db.host}" in str(error)
    assert "column 'at' is timestamp without time zone, which reads the key without its " in (
        str(error)
    )
    assert "pass it without tzinfo, in the zone the column's values are in" in str(error)
    assert row == {"id": 1, "at": noon} and none is None


async def test_a_bytes_key_against_a_text_column_fails_alone_as_where_refuses_it(
    postgres_db: postgres.Database,
) -> None:
    # A bytes key's text is bytea input, which a text column read as itself: b'ada'
    # found 'ada', b'\xff' (\377) the row '\377'; WHERE name = %s refuses bytes.
    columns = "id INT PRIMARY KEY, name TEXT, code VARCHAR(10), raw BYTEA"
    rows = [(1, "ada", "ada", b"ada"), (2, "\\377", "\\377", b"\xff")]
    await make(postgres_db, "tags", columns, rows)
    for column, kind in (("name", "text"), ("code", "varchar")):
        with pytest.raises(psycopg.errors.UndefinedFunction):
            await postgres_db.fetch(f"SELECT id FROM tags WHERE {column} = %s", [b"ada"])
        tags = postgres_db.one("tags", column, columns=["id"])
        before = pg_counter().count
        ada, text, ff = await load_all(tags, [b"ada", "ada", b"\xff"])
        assert text == {"id": 1, column: "ada"}
        sent = pg_counter().count - before
        for key, error in ((b"ada", ada), (b"\xff", ff)):
            assert isinstance(error, KeyEncodingError) and error.keys == [key]
            assert str(error) == (
                f"loader 'tags_by_{column}' could not send key {key!r} (bytes) to PostgreSQL at "
                f"{postgres_db.host}: the server cannot read it as a value of the column it is "
                f"compared with (MisreadKeyError: column {column!r} is {kind}, not bytea, and "
                f"WHERE {column} = key refuses a bytes key (no operator {kind} = bytea); pass "
                "the key as the column's type: key.decode() for text). Only this key failed; "
                "the other keys of its batch were loaded. Pass keys of the column's type."
            )
        assert sent == 2  # once with every key, once more without the bytes keys
    raw = postgres_db.one("tags", "raw", columns=["id"])  # bytea: bytes keys as WHERE
    found = await load_all(raw, [b"ada", b"\xff", "ada"])
    assert [r["id"] for r in found] == [1, 2, 1]


# -- the property: a date or time key gets what WHERE col = key gives, or its own error ------

_ZONES = [None, datetime.UTC, datetime.timezone(datetime.timedelta(hours=5))]
_ZONES.append(datetime.timezone(datetime.timedelta(hours=-3, minutes=-30)))
_CLOCKS = [datetime.time(0), datetime.time(7), datetime.time(12), datetime.time(0, 0, 1)]
_DAY = datetime.date(2024, 1, 1)
WHEN = st.one_of(
    st.builds(
        datetime.datetime.combine,
        st.sampled_from([_DAY, _DAY + datetime.timedelta(days=1)]),
        st.sampled_from(_CLOCKS),
        st.sampled_from(_ZONES),
    ),
    st.sampled_from([_DAY, _DAY + datetime.timedelta(days=1)]),
    st.builds(lambda c, z: c.replace(tzinfo=z), st.sampled_from(_CLOCKS), st.sampled_from(_ZONES)),
)
TIME_COLUMNS = ["DATE", "TIMESTAMP", "TIMESTAMPTZ", "TIME"]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@example(keys=[datetime.datetime(2024, 1, 1, 0, 0, 1)])  # a date column read it as 2024-01-01
@example(keys=[datetime.datetime(2024, 1, 1, 12, tzinfo=_ZONES[2])])  # a timestamp, as 12:00
@given(keys=st.lists(WHEN, min_size=1, max_size=6))
def test_a_date_or_time_key_gets_what_where_gives_it_or_its_own_error(
    postgres_url: str, keys: list[Any]
) -> None:
    # The server reads each key's text as the column's type, and date, timestamp
    # and time input drop what the type has no room for (a time of day, an offset)
    # without a word: a key must not get a row for a value it is not equal to.
    async def check(db: postgres.Database) -> None:
        stamps = [datetime.datetime.combine(_DAY, c) for c in _CLOCKS]
        for column in TIME_COLUMNS:
            values = stamps if column.startswith("TIMESTAMP") else [s.date() for s in stamps]
            if column == "TIME":
                values = list(_CLOCKS)
            rows = [(i, v) for i, v in enumerate(dict.fromkeys(values))]
            # A table per type: prepared statements keep the array type they were planned with.
            table = f"moments_{column.lower()}"
            await make(db, table, f"id INT PRIMARY KEY, at {column}", rows)
            loader = db.many(table, "at")
            together = await load_all(loader, keys)
            for key, value in zip(keys, together, strict=True):
                try:
                    where = await db.fetch(f"SELECT id FROM {table} WHERE at = %s", [key])
                except psycopg.Error:
                    continue  # no answer to match (time against a date: no such =)
                if isinstance(value, Exception):
                    assert isinstance(value, KeyEncodingError) and value.keys == [key], value
                else:
                    assert sorted(r["id"] for r in value) == sorted(r["id"] for r in where), (
                        column,
                        key,
                    )

    on_a_new_pool(postgres_url, check)


# -- a DBA's settings for the role or database -----------------------------------------


async def test_values_read_back_whole_whatever_the_roles_output_styles(postgres_url: str) -> None:
    # psycopg reads values as text: a role's DateStyle 'SQL, DMY' failed every batch with
    # a timestamptz column ("can't parse timestamptz with DateStyle"), its IntervalStyle
    # 'sql_standard' every one with an interval.
    role = f"rs_{uuid.uuid4().hex[:8]}"
    table = f"styled_{role}"
    _admin(postgres_url, f"CREATE ROLE {role} LOGIN")
    try:
        for setting in ("DateStyle = 'SQL, DMY'", "IntervalStyle = 'sql_standard'"):
            _admin(postgres_url, f"ALTER ROLE {role} SET {setting}")
        _admin(
            postgres_url,
            f"CREATE TABLE {table} (id int PRIMARY KEY, day date, at timestamptz, "
            f"span interval); GRANT SELECT ON {table} TO {role}; INSERT INTO {table} "
            "VALUES (1, '2024-03-01', '2024-03-01 12:00:00+00', '1 day 02:03:04')",
        )
        parts = urlsplit(postgres_url)
        url = urlunsplit(parts._replace(netloc=f"{role}@{parts.netloc.rpartition('@')[2]}"))
        db = await postgres.connect(url, max_size=1)
        try:
            (row,) = await load_all(db.one(table), [1])
        finally:
            await db.close()
        assert row == {
            "id": 1,
            "day": datetime.date(2024, 3, 1),
            "at": datetime.datetime(2024, 3, 1, 12, tzinfo=datetime.UTC),
            "span": datetime.timedelta(days=1, seconds=7384),
        }
    finally:
        _admin(postgres_url, f"DROP TABLE IF EXISTS {table}")
        _admin(postgres_url, f"DROP ROLE {role}")
