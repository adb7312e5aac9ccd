"""What the PostgreSQL loaders send: one statement per batch with the keys as one array parameter.

The shared suites (test_sql_backends, _matching, _keys, _errors, _lazy, _loops)
run on PostgreSQL too; this file holds what only PostgreSQL does. Statements
are counted on the wire by the proxy in front of the server
(examples/blog/pg_statements.py): what the server received, with its text and
number of parameters.
"""

from __future__ import annotations

import asyncio
import uuid
import warnings
from typing import Any

import psycopg
import pytest
from contrib_helpers import pg_counter
from hypothesis import HealthCheck, given, settings
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
    # The failed statement, probes that run nothing (LIMIT 0), the statement again.
    first, *probes, last = got.statements
    assert len(probes) <= 2 * 6
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
        "kwargs={'autocommit': True} (batchy_contrib.sql.postgres.connect does). while "
        "loading keys [1]"
    )


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
    async def run() -> None:
        db = await postgres.connect(postgres_url, max_size=2)
        try:
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
    assert await load_all(items, [2]) == [{"id": 2, "label": "b"}]
    assert pg_counter().connections == opened  # the one connection served every batch
    await db.close()
