"""A key the driver cannot bind fails alone; the batch's other keys are sent once (issue 13, section 3).

On PostgreSQL, so does a key the server cannot read as the column's type
(tests/contrib/test_sql_postgres.py).
"""

from __future__ import annotations

import decimal
import tomllib
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from contrib_helpers import statements
from packaging.requirements import Requirement

import batchy
from batchy.testing import record
from batchy_contrib.sql import mysql, sqlite
from batchy_contrib.sql.sqlite import KeyEncodingError

PEOPLE = [(1, "ada"), (2, "bob"), (3, "cy")]
ACCEPTED = {
    "MySQL": "None, int, float, str, bytes, Decimal, date, datetime, time or timedelta",
    "SQLite": "None, int, float, str or bytes (or a type given sqlite3.register_adapter)",
    "PostgreSQL": (
        "None, int, float, str, bytes, Decimal, UUID, date, datetime, time, timedelta or "
        "another type psycopg adapts"
    ),
}
#: Values of a type the driver binds that it still cannot encode, and the fix each backend states.
REFUSED = {
    "MySQL": ["a\udc80", float("nan")],
    "SQLite": ["a\udc80", 2**70],
    "PostgreSQL": ["a\udc80", "a\x00"],  # its text holds no NUL (a NaN is just text there)
}
ENCODE_HINT = {
    "MySQL": "text without lone surrogates, finite numbers, integers of at most 64 bits on SQLite.",
    "PostgreSQL": "text without NUL characters or lone surrogates.",
}
ENCODE_HINT["SQLite"] = ENCODE_HINT["MySQL"]


async def make_people(db: Any) -> None:
    p = db.dialect.param
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        await db.execute("DROP TABLE IF EXISTS people")
    await db.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name VARCHAR(20))")
    await db.executemany(f"INSERT INTO people VALUES ({p}, {p})", PEOPLE)


async def load_all(loader: batchy.Loader[Any, Any], keys: list[Any]) -> list[Any]:
    async with batchy.scope():
        return await batchy.gather(*(loader(k) for k in keys), return_exceptions=True)


async def test_a_tuple_key_fails_alone_and_the_others_are_loaded(db: Any) -> None:
    await make_people(db)
    people = db.one("people")
    before = await statements(db)
    with record() as rec:
        first, bad, second = await load_all(people, [1, (1, 2), 2])
    assert rec.calls(people) == [[1, (1, 2), 2]]  # it joined the batch, as any hashable key
    assert await statements(db) - before == 1
    assert first == {"id": 1, "name": "ada"} and second == {"id": 2, "name": "bob"}
    assert isinstance(bad, KeyEncodingError)
    assert bad.key == (1, 2) and bad.keys == [(1, 2)] and bad.loader == "people_by_id"
    assert str(bad) == (
        f"loader 'people_by_id' cannot send key (1, 2) (tuple) to {db.kind} at {db.host}: "
        f"its driver binds only keys of type {ACCEPTED[db.kind]}. A key is one value; for a "
        "key over several columns, write the statement yourself with db.query(...). Only "
        "this key failed; the other keys of its batch were loaded."
    )


async def test_a_decimal_key_fails_alone_on_sqlite(sqlite_db: sqlite.Database) -> None:
    await make_people(sqlite_db)
    people = sqlite_db.one("people")
    before = await statements(sqlite_db)
    bad, ok = await load_all(people, [decimal.Decimal("1"), 3])
    assert await statements(sqlite_db) - before == 1
    assert ok == {"id": 3, "name": "cy"}
    assert isinstance(bad, KeyEncodingError)
    assert str(bad) == (
        f"loader 'people_by_id' cannot send key Decimal('1') (Decimal) to SQLite at "
        f"{sqlite_db.host}: its driver binds only keys of type {ACCEPTED['SQLite']}. Pass "
        "str(key) or float(key) as the column stores it, or register an adapter once: "
        "sqlite3.register_adapter(Decimal, str). Only this key failed; the other keys of its "
        "batch were loaded."
    )


async def test_date_keys_on_sqlite_are_the_text_sqlite3_wrote_without_its_deprecated_adapters(
    sqlite_db: sqlite.Database,
) -> None:
    # Python 3.12 deprecated sqlite3's default date adapters: each bound value warned.
    import datetime as dt
    import sqlite3

    await sqlite_db.execute("CREATE TABLE stamps (at TEXT PRIMARY KEY, what TEXT)")
    rows = [("2020-01-02 03:04:05", "datetime"), ("2020-01-02", "date")]
    await sqlite_db.executemany("INSERT INTO stamps VALUES (?, ?)", rows)
    stamps = sqlite_db.one("stamps", key="at")
    keys = [dt.datetime(2020, 1, 2, 3, 4, 5), dt.date(2020, 1, 2), "2020-01-02"]
    before = await statements(sqlite_db)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = await load_all(stamps, keys)
    assert [r["what"] for r in found] == ["datetime", "date", "date"]
    assert await statements(sqlite_db) - before == 1
    # An adapter the application registered still decides how its dates are bound.
    previous = sqlite3.adapters.get((dt.date, sqlite3.PrepareProtocol))
    sqlite3.register_adapter(dt.date, lambda d: d.strftime("%Y-%m-%d") + " (app)")
    try:
        await sqlite_db.execute("INSERT INTO stamps VALUES ('2021-05-06 (app)', 'app')")
        found = await load_all(sqlite_db.one("stamps", key="at"), [dt.date(2021, 5, 6)])
        assert found == [{"at": "2021-05-06 (app)", "what": "app"}]
    finally:
        if previous is None:
            del sqlite3.adapters[(dt.date, sqlite3.PrepareProtocol)]
        else:
            sqlite3.adapters[(dt.date, sqlite3.PrepareProtocol)] = previous


async def test_a_decimal_key_is_a_number_on_mysql(mysql_db: mysql.Database) -> None:
    await make_people(mysql_db)
    assert await load_all(mysql_db.one("people"), [decimal.Decimal("2")]) == [
        {"id": 2, "name": "bob"}
    ]


async def test_bytes_keys_work_on_mysql(mysql_db: mysql.Database) -> None:
    # aiomysql 0.3 cannot escape bytes under PyMySQL 1.2 (it calls a helper PyMySQL
    # replaced with a string): before, one bytes key failed the whole batch.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        await mysql_db.execute("DROP TABLE IF EXISTS blobs")
    await mysql_db.execute("CREATE TABLE blobs (k VARBINARY(8) PRIMARY KEY, v INT)")
    await mysql_db.execute(
        "INSERT INTO blobs VALUES (%s, 1), (%s, 2), (%s, 3)", [b"\x00\xff", b"a'b\\", b"A"]
    )
    blobs = mysql_db.one("blobs", "k", row=lambda k, v: v)
    before = await mysql_db.questions()
    assert await load_all(blobs, [b"\x00\xff", b"a'b\\", b"a", "A", b"zz"]) == [
        1,
        2,
        None,  # binary: b"a" is not b"A"
        3,
        None,
    ]
    # One statement per kind of key: the bytes, and the text "A" (see test_mysql_keys).
    assert await mysql_db.questions() - before == 2


async def test_keys_the_driver_refuses_fail_alone_and_the_rest_go_in_one_statement(
    db: Any,
) -> None:
    await make_people(db)
    by_name = db.one("people", "name", columns=["id"])
    # Types the driver binds, values it cannot encode: found only by asking it.
    refused = REFUSED[db.kind]
    before = await statements(db)
    *bad, ada = await load_all(by_name, [*refused, "ada"])
    assert await statements(db) - before == 1
    assert ada == {"id": 1, "name": "ada"}
    for key, error in zip(refused, bad, strict=True):
        assert isinstance(error, KeyEncodingError) and error.key is key
        assert str(error).startswith(
            f"loader 'people_by_name' could not encode key {key!r} ({type(key).__name__}) for "
            f"{db.kind} at {db.host} ("
        )
        assert str(error).endswith(
            "). Only this key failed; the other keys of its batch were loaded. Pass a value "
            f"the driver can encode: {ENCODE_HINT[db.kind]}"
        )
        assert error.__cause__ is not None


async def test_a_batch_of_only_bad_keys_sends_nothing(db: Any) -> None:
    await make_people(db)
    people = db.one("people")
    before = await statements(db)
    results = await load_all(people, [(1,), frozenset({2})])
    assert all(isinstance(r, KeyEncodingError) for r in results)
    assert await statements(db) - before == 0


async def test_a_query_loader_fails_bad_keys_alone_too(db: Any) -> None:
    await make_people(db)
    names = db.query(
        "SELECT id, name FROM people WHERE id IN {keys}", key="id", row=lambda id, name: name
    )
    assert [
        type(r).__name__ if isinstance(r, Exception) else r
        for r in await load_all(names, [3, (3,), 1])
    ] == ["cy", "KeyEncodingError", "ada"]


async def test_a_failed_bad_key_is_not_cached(db: Any) -> None:
    await make_people(db)
    people = db.one("people")
    async with batchy.scope():
        with pytest.raises(KeyEncodingError):
            await people((1,))
        assert await people(1) == {"id": 1, "name": "ada"}


async def test_keys_are_escaped_for_no_backslash_escapes_mode(mysql_url: str) -> None:
    db = await mysql.connect(mysql_url, maxsize=1, sql_mode="NO_BACKSLASH_ESCAPES")
    try:
        await make_people(db)
        await db.execute("INSERT INTO people VALUES (%s, %s)", [9, "o'\\x"])
        by_name = db.one("people", "name", columns=["id"])
        assert await load_all(by_name, ["o'\\x", "ada' OR '1'='1", "\\' OR 1=1 -- "]) == [
            {"id": 9, "name": "o'\\x"},
            None,
            None,
        ]
    finally:
        await db.close()


def test_the_mysql_drivers_are_the_versions_pinned_and_tested() -> None:
    # pyproject's [mysql] extra pins the aiomysql / PyMySQL ranges this suite runs on;
    # PyMySQL 1.3 drops a name aiomysql 0.3 imports, aiomysql 0.4 is unreleased.
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    pins = [Requirement(r) for r in project["project"]["optional-dependencies"]["mysql"]]
    assert {r.name.lower() for r in pins} == {"aiomysql", "pymysql"}
    for req in pins:
        assert req.specifier.contains(metadata.version(req.name)), (req, metadata.version(req.name))
        assert any(s.operator == "<" for s in req.specifier), f"{req} has no upper bound"


async def test_fetch_raises_the_drivers_own_error_for_a_bad_parameter(db: Any) -> None:
    await make_people(db)
    p = db.dialect.param
    # psycopg sends a tuple as a record: it refuses an object() instead.
    bad = object() if db.kind == "PostgreSQL" else (1, 2)
    with pytest.raises(Exception) as info:
        await db.fetch(f"SELECT * FROM people WHERE id = {p}", [bad])
    assert not isinstance(info.value, batchy.BatchyError)  # raw access: the driver's error
    assert type(bad).__name__ in str(info.value)
