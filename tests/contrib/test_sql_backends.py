"""The SQL loaders on SQLite, MariaDB and PostgreSQL: one shared suite, so the backends behave alike."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import pytest
from contrib_helpers import statements

import batchy
from batchy.testing import record
from batchy_contrib.sql.mysql import DataSourceError, KeyEncodingError

PEOPLE = [(1, "ada", "red"), (2, "bob", "blue"), (3, "cy", "red"), (4, "dee", "blue")]
PETS = [(10, 1, "rex"), (11, 1, "tom"), (12, 3, "kit"), (13, 1, "ace")]


async def make_tables(db: Any) -> None:
    p = db.dialect.param
    with warnings.catch_warnings():  # MariaDB warns about dropping a missing table
        warnings.simplefilter("ignore")
        for table in ("people", "pets"):
            await db.execute(f"DROP TABLE IF EXISTS {table}")
    await db.execute(
        "CREATE TABLE people (id INTEGER PRIMARY KEY, name VARCHAR(50), team VARCHAR(20))"
    )
    await db.execute("CREATE TABLE pets (id INTEGER PRIMARY KEY, owner_id INTEGER, name TEXT)")
    await db.executemany(f"INSERT INTO people VALUES ({p}, {p}, {p})", PEOPLE)
    await db.executemany(f"INSERT INTO pets VALUES ({p}, {p}, {p})", PETS)


async def load_all(loader: batchy.Loader[Any, Any], keys: list[Any]) -> list[Any]:
    async with batchy.scope():
        return await batchy.gather(*(loader(k) for k in keys))


async def test_one_row_per_key_in_one_statement(db: Any) -> None:
    await make_tables(db)
    people = db.one("people")
    before = await statements(db)
    with record() as rec:
        rows = await load_all(people, [3, 1, 99, 3])
    assert rows == [
        {"id": 3, "name": "cy", "team": "red"},
        {"id": 1, "name": "ada", "team": "red"},
        None,
        {"id": 3, "name": "cy", "team": "red"},
    ]
    assert rec.calls(people) == [[3, 1, 99]]  # duplicate keys sent once
    assert people.name == "people_by_id"
    assert await statements(db) - before == 1


async def test_many_rows_per_key_ordered(db: Any) -> None:
    await make_tables(db)
    pets = db.many("pets", "owner_id", order_by="-id", columns=["name"])
    with record() as rec:
        rows = await load_all(pets, [1, 2, 3])
    assert rows == [
        [
            {"name": "ace", "owner_id": 1},
            {"name": "tom", "owner_id": 1},
            {"name": "rex", "owner_id": 1},
        ],
        [],
        [{"name": "kit", "owner_id": 3}],
    ]
    assert rec.calls(pets) == [[1, 2, 3]]


async def test_custom_query_with_bound_key_list(db: Any) -> None:
    await make_tables(db)
    pet_counts = db.query(
        "SELECT owner_id, COUNT(*) AS n FROM pets WHERE owner_id IN {keys} GROUP BY owner_id",
        key="owner_id",
        row=lambda owner_id, n: int(n),
        name="pet_counts",
    )
    with record() as rec:
        assert await load_all(pet_counts, [1, 2, 3]) == [3, None, 1]
    assert rec.calls("pet_counts") == [[1, 2, 3]]


@dataclass(frozen=True)
class Person:
    id: int
    name: str
    team: str


async def test_rows_as_a_user_type(db: Any) -> None:
    await make_tables(db)
    people = db.one("people", row=Person)
    by_team = db.many("people", "team", row=Person, order_by="id")
    assert await load_all(people, [2]) == [Person(2, "bob", "blue")]
    assert await load_all(by_team, ["blue"]) == [
        [Person(2, "bob", "blue"), Person(4, "dee", "blue")]
    ]


async def test_large_batches_are_split(db: Any) -> None:
    await make_tables(db)
    people = db.one("people", max_batch_size=2)
    before = await statements(db)
    with record() as rec:
        rows = await load_all(people, [1, 2, 3, 4, 5])
    assert [r and r["id"] for r in rows] == [1, 2, 3, 4, None]
    assert sorted(rec.calls(people)) == [[1, 2], [3, 4], [5]]
    assert await statements(db) - before == 3


async def test_default_chunk_size_keeps_a_page_in_one_statement(db: Any) -> None:
    await make_tables(db)
    people = db.one("people")
    with record() as rec:
        await load_all(people, list(range(1000)))
    assert len(rec.calls(people)) == 1


INJECTIONS = [
    "ada' OR '1'='1",
    "x'; DROP TABLE people; --",
    '" OR ""="',
    "\\' OR 1=1 -- ",
    "ada\x00",
]


async def test_injection_through_keys_is_just_a_value(db: Any) -> None:
    await make_tables(db)
    by_name = db.one("people", "name")
    async with batchy.scope():
        rows = await batchy.gather(
            *(by_name(k) for k in [*INJECTIONS, "ada"]), return_exceptions=True
        )
    if db.kind == "PostgreSQL":  # its text cannot hold NUL: that key fails alone
        assert isinstance(rows[-2], KeyEncodingError) and rows[-2].key == "ada\x00"
        rows[-2] = None
    assert rows[:-1] == [None] * len(INJECTIONS)
    assert rows[-1] == {"id": 1, "name": "ada", "team": "red"}
    assert len(await db.fetch("SELECT * FROM people")) == 4  # nothing dropped


@pytest.mark.parametrize(
    ("factory", "args", "kwargs", "what"),
    [
        ("one", ("people; DROP TABLE people",), {}, "table"),
        ("one", ("people", "id) OR (1=1"), {}, "key column"),
        ("one", ("people",), {"columns": ["name", "*"]}, "column"),
        ("one", ("`people`",), {}, "table"),
        ("many", ("pets", "owner_id"), {"order_by": "id; DELETE FROM pets"}, "order_by column"),
        ("many", ("pets", "owner_id"), {"order_by": ["-id", "1"]}, "order_by column"),
        ("one", ("a" * 65,), {}, "table"),
        ("one", (42,), {}, "table"),
    ],
)
def test_injection_through_names_is_refused(
    sqlite_db: Any, factory: str, args: tuple[Any, ...], kwargs: dict[str, Any], what: str
) -> None:
    with pytest.raises(batchy.UsageError) as info:
        getattr(sqlite_db, factory)(*args, **kwargs)
    message = str(info.value)
    assert message.startswith(f"{what} ")
    assert "is not a plain SQL identifier" in message
    assert "db.query(...)" in message  # the way out


def test_columns_must_be_a_list(sqlite_db: Any) -> None:
    with pytest.raises(
        batchy.UsageError,
        match=r"columns= takes a list of column names, got the string 'name'; write columns=\['name'\]",
    ):
        sqlite_db.one("people", columns="name")


@pytest.mark.parametrize("sql", ["SELECT * FROM pets", "SELECT {keys} {keys}", 42])
def test_query_needs_exactly_one_keys_mark(sqlite_db: Any, sql: Any) -> None:
    with pytest.raises(
        batchy.UsageError, match=r"db.query\(\) needs a statement with exactly one \{keys\}"
    ):
        sqlite_db.query(sql, key="id")


def test_query_needs_a_key_column(sqlite_db: Any) -> None:
    with pytest.raises(
        batchy.UsageError, match=r"db.query\(\) needs key= naming the result column"
    ):
        sqlite_db.query("SELECT * FROM pets WHERE id IN {keys}", key="")


def test_row_must_be_callable(sqlite_db: Any) -> None:
    with pytest.raises(
        batchy.UsageError, match=r"loader 'people_by_id': row= must be a type or function"
    ):
        sqlite_db.one("people", row=42)


async def test_non_unique_column_fails_only_the_duplicated_key(db: Any) -> None:
    await make_tables(db)
    by_owner = db.one("pets", "owner_id")
    async with batchy.scope():
        results = await batchy.gather(by_owner(3), by_owner(1), return_exceptions=True)
    assert results[0] == {"id": 12, "owner_id": 3, "name": "kit"}
    assert isinstance(results[1], batchy.LoaderError)
    assert str(results[1]) == (
        "loader 'pets_by_owner_id' expects at most one row per key but got 3 rows for key 1; "
        "the 'owner_id' column is not unique. Use db.many(...) (or query(..., many=True)) "
        "to get a list per key."
    )


async def test_row_type_that_does_not_fit(db: Any) -> None:
    await make_tables(db)
    pets = db.one("pets", row=Person)
    with pytest.raises(batchy.LoaderError) as info:
        await load_all(pets, [10])
    assert str(info.value).startswith(
        "loader 'pets_by_id' could not build 'Person' from the row "
        "{'id': 10, 'owner_id': 1, 'name': 'rex'} ("
    )
    assert "row= is called as row(**columns)" in str(info.value)


async def test_query_rows_without_the_key_column(db: Any) -> None:
    await make_tables(db)
    names = db.query("SELECT name FROM pets WHERE owner_id IN {keys}", key="owner_id")
    with pytest.raises(
        batchy.LoaderError,
        match=r"loader 'query_by_owner_id': the query's rows have no column 'owner_id' to match them to keys \(columns: \['name'\]\)",
    ):
        await load_all(names, [1])


async def test_a_rejected_query_names_loader_and_host(db: Any) -> None:
    await make_tables(db)
    ghosts = db.one("no_such_table")
    with pytest.raises(DataSourceError) as info:
        await load_all(ghosts, [1, 2])
    error = info.value
    assert db.kind in ("MySQL", "SQLite", "PostgreSQL")
    assert str(error).startswith(
        f"loader 'no_such_table_by_id' had its query rejected by {db.kind} at {db.host} ("
    )
    assert "while loading keys [1, 2]. Check the table and column names. SQL: " in str(error)
    assert error.loader == "no_such_table_by_id" and error.keys == [1, 2] and error.host == db.host
    assert isinstance(error, batchy.LoaderError)  # evicted from the cache, retry can succeed


async def test_failed_keys_are_retried_after_the_table_appears(db: Any) -> None:
    late = db.one("late")
    async with batchy.scope():
        with pytest.raises(DataSourceError):
            await late(1)
        await db.execute("CREATE TABLE late (id INTEGER PRIMARY KEY)")
        await db.execute("INSERT INTO late VALUES (1)")
        assert await late(1) == {"id": 1}
    await db.execute("DROP TABLE late")


def test_sqlite_threads_must_be_positive() -> None:
    from batchy_contrib.sql import sqlite

    with pytest.raises(
        batchy.UsageError, match=r"sqlite.Database threads= must be a positive int, got 0"
    ):
        sqlite.Database(":memory:", threads=0)


async def test_sqlite_file_that_cannot_be_opened(tmp_path: Any) -> None:
    from batchy_contrib.sql import sqlite

    path = str(tmp_path / "no" / "such" / "dir.db")
    db = sqlite.Database(path)
    with pytest.raises(DataSourceError) as info:
        await load_all(db.one("users"), [1])
    assert str(info.value).startswith(
        f"loader 'users_by_id' cannot reach SQLite at {path} (OperationalError: unable to "
        "open database file) while loading keys [1]."
    )
    await db.close()


async def test_executemany_returns_the_rows_written_and_no_rows_write_none(db: Any) -> None:
    # MariaDB raised TypeError ('int() argument must be ... not NoneType') for no rows:
    # aiomysql returns None when it has nothing to send.
    await make_tables(db)
    p = db.dialect.param
    assert await db.executemany(f"INSERT INTO pets VALUES ({p}, {p}, {p})", []) == 0
    rows = [(20, 2, "bo"), (21, 2, "jo")]
    assert await db.executemany(f"INSERT INTO pets VALUES ({p}, {p}, {p})", rows) == 2


async def test_sqlite_in_memory_uses_one_connection() -> None:
    from batchy_contrib.sql import sqlite

    db = sqlite.Database(":memory:", threads=8)
    await db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    await db.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(20)])
    loader = db.one("t", max_batch_size=2)  # 10 chunks in parallel, one connection
    assert [r["id"] for r in await load_all(loader, list(range(20)))] == list(range(20))
    await db.close()


async def test_keys_equal_in_python_but_sent_apart_each_get_their_own_rows(db: Any) -> None:
    # 1 == 1.0 == True in Python, and the engine merges equal keys; each goes to the
    # server as its own value, which a text column tells apart (SQLite, PostgreSQL:
    # '1' and '1.0'; MariaDB compares text with a number as numbers: both rows).
    p = db.dialect.param
    with warnings.catch_warnings():  # MariaDB warns about dropping a missing table
        warnings.simplefilter("ignore")
        await db.execute("DROP TABLE IF EXISTS codes")
    await db.execute("CREATE TABLE codes (id INTEGER PRIMARY KEY, code VARCHAR(10))")
    await db.executemany(f"INSERT INTO codes VALUES ({p}, {p})", [(1, "1"), (2, "1.0")])
    codes = db.many("codes", "code", columns=["id"], order_by="id")
    alone = [(await load_all(codes, [k]))[0] for k in (1.0, 1)]
    with record() as rec:
        assert await load_all(codes, [1.0, 1, 1.0]) == [alone[0], alone[1], alone[0]]
    assert rec.calls(codes) == [[1.0, 1]]
    assert {"id": 1, "code": "1"} in alone[1]
