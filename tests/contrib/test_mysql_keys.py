"""MySQL keys get what they get alone, whatever their batch: other charsets, other kinds of key."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest

import batchy
from batchy_contrib.sql import mysql
from batchy_contrib.sql.mysql import KeyEncodingError


async def make(db: mysql.Database, table: str, columns: str, rows: list[tuple[Any, ...]]) -> None:
    with warnings.catch_warnings():  # MariaDB notes the missing table
        warnings.simplefilter("ignore")
        await db.execute(f"DROP TABLE IF EXISTS {table}")
    await db.execute(f"CREATE TABLE {table} ({columns})")
    await db.executemany(f"INSERT INTO {table} VALUES (%s, %s)", rows)


async def alone(db: mysql.Database, table: str, key: Any) -> list[int] | str:
    """What ``WHERE name = key`` alone gives: the ids, or the server's refusal."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # MariaDB's truncated-number notes
            rows = await db.fetch(f"SELECT id FROM {table} WHERE name = %s ORDER BY id", [key])
    except Exception as error:
        return type(error).__name__
    return [r["id"] for r in rows]


async def batch(loader: batchy.Loader[Any, Any], keys: list[Any]) -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # KeyTypeWarning, MariaDB's truncated-number notes
        async with batchy.scope():
            got = await batchy.gather(*(loader(k) for k in keys), return_exceptions=True)
    return [[r["id"] for r in v] if isinstance(v, list) else v for v in got]


@pytest.mark.parametrize("charset", ["latin1", "ascii"])
async def test_text_keys_against_a_column_of_another_charset_each_get_their_rows_alone(
    mysql_db: mysql.Database, charset: str
) -> None:
    table = f"keys_{charset}"
    await make(
        mysql_db,
        table,
        f"id INT PRIMARY KEY, name VARCHAR(20) CHARACTER SET {charset}",
        [(0, "ada"), (1, "é" if charset == "latin1" else "b"), (2, "?")],
    )
    by_name = mysql_db.many(table, "name", columns=["id"], order_by="id")
    keys = ["ada", "é", "ADA", "€", "日", None, "?"]
    for _ in range(2):  # the first batch learns the charset; the next converts at once
        got = await batch(by_name, keys)
        for k, value in zip(keys, got, strict=True):
            want = [] if k is None else await alone(mysql_db, table, k)
            if isinstance(want, list):
                assert value == want, k
            else:  # the server refuses it alone: it fails alone, never becoming '?'
                assert isinstance(value, KeyEncodingError), k
                assert str(value) == (
                    f"loader '{table}_by_name' could not send key {k!r} (str) to MySQL at "
                    "127.0.0.1:3306: the server cannot read it as a value of the column it is "
                    f"compared with (ValueError: the column {table}.name is in character set "
                    f"{charset}, which has no {k!r} (WHERE name = key alone is refused, or finds "
                    "nothing); convert the column to utf8mb4 to hold any text). Only this key "
                    "failed; the other keys of its batch were loaded. Pass keys of the column's "
                    "type."
                )
    assert "日" in keys and isinstance(got[keys.index("日")], KeyEncodingError)
    await mysql_db.execute(f"DROP TABLE {table}")


@pytest.mark.parametrize("charset", ["utf8mb4", "utf8mb3"])
async def test_a_bytes_key_that_is_no_text_in_the_column_charset_fails_alone(
    mysql_db: mysql.Database, charset: str
) -> None:
    # The server reads a bytes key as text in the column's charset, and refuses
    # one that is none (WHERE name = X'FF' alone too): every bytes key of the
    # batch failed with it, as QueryRejectedError.
    table = f"keys_bytes_{charset}"
    columns = f"id INT PRIMARY KEY, name VARCHAR(20) CHARACTER SET {charset}"
    await make(mysql_db, table, columns, [(0, "ada"), (1, "ADA"), (2, "traíl")])
    by_name = mysql_db.many(table, "name", columns=["id"], order_by="id")
    emoji = "\U0001f600".encode()  # 4 bytes of UTF-8: utf8mb3 has no room for it
    keys = [b"ada", b"\xff", "traíl".encode(), "traíl".encode("latin-1"), "ada", emoji]
    want = [await alone(mysql_db, table, k) for k in keys]
    refused = "OperationalError"
    assert want == [[0, 1], refused, [2], refused, [0, 1], [] if charset == "utf8mb4" else refused]
    got = await batch(by_name, keys)
    for k, value, w in zip(keys, got, want, strict=True):
        if w != refused:
            assert value == w, k
            continue
        assert isinstance(value, KeyEncodingError) and value.keys == [k], k
        assert str(value) == (
            f"loader '{table}_by_name' could not send key {k!r} (bytes) to MySQL at "
            "127.0.0.1:3306: the server cannot read it as a value of the column it is compared "
            f"with (ValueError: the column {table}.name is in character set {charset}, and the "
            f"key is no text in it (WHERE name = key alone is refused: Invalid {charset} "
            f"character string); pass the key as text (str), or bytes that are {charset} "
            "text). Only this key failed; the other keys of its batch were loaded. Pass keys "
            "of the column's type."
        )
    await mysql_db.execute(f"DROP TABLE {table}")


async def test_a_number_key_against_a_text_column_gets_what_it_gets_alone_in_any_batch(
    mysql_db: mysql.Database,
) -> None:
    # A text key made the keys' column text, so 0 was compared as '0', not as a number.
    await make(
        mysql_db,
        "keys_mixed",
        "id INT PRIMARY KEY, name VARCHAR(20)",
        [(0, "ada"), (1, "bob"), (2, "1"), (3, "1.5")],
    )
    by_name = mysql_db.many("keys_mixed", "name", columns=["id"], order_by="id")
    keys: list[Any] = [0, "ada", 1.0, None, b"bob", 1.5, "1"]
    want = [[] if k is None else await alone(mysql_db, "keys_mixed", k) for k in keys]
    assert want[0] == [0, 1]  # WHERE name = 0 compares as numbers: 'ada' and 'bob' read as 0
    for _ in range(2):
        assert await batch(by_name, keys) == want
        assert await batch(by_name, keys[::-1]) == want[::-1]
    await mysql_db.execute("DROP TABLE keys_mixed")


async def test_a_big_int_key_beside_a_float_key_gets_its_own_row(mysql_db: mysql.Database) -> None:
    # Typed together, both keys were doubles: 2**53 + 1 became 2**53 and found its row.
    big = 2**53
    await make(mysql_db, "keys_big", "id BIGINT PRIMARY KEY, name INT", [(big, 0), (1, 1)])
    by_id = mysql_db.many("keys_big", "id", columns=["id"])
    assert await batch(by_id, [big + 1, 1.5, big]) == [[], [], [big]]
    await mysql_db.execute("DROP TABLE keys_big")


async def test_a_column_converted_to_utf8mb4_since_its_charset_was_learnt_takes_any_text(
    mysql_db: mysql.Database,
) -> None:
    # The charset learnt from a latin1 column was kept after ALTER TABLE: a key
    # latin1 lacks failed with KeyEncodingError though the column now holds it.
    table = "keys_altered_charset"
    columns = "id INT PRIMARY KEY, name VARCHAR(20) CHARACTER SET latin1"
    await make(mysql_db, table, columns, [(0, "ada"), (1, "é")])
    by_name = mysql_db.many(table, "name", columns=["id"], order_by="id")
    assert await batch(by_name, ["ada", "é", "€"]) == [[0], [1], []]  # learns latin1
    await mysql_db.execute(f"ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4")
    await mysql_db.execute(f"INSERT INTO {table} VALUES (2, '日本')")
    assert await batch(by_name, ["ada", "日本", "é"]) == [[0], [2], [1]]
    assert await batch(by_name, ["日本"]) == [[2]]
    await mysql_db.execute(f"DROP TABLE {table}")


async def test_keys_of_several_kinds_share_one_timeout(
    mysql_db: mysql.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each kind's statement had a timeout= of its own: a batch of three kinds
    # waited three times timeout= before failing, or not at all.
    table = "keys_kinds_timeout"
    await make(mysql_db, table, "id INT PRIMARY KEY, name VARCHAR(20)", [(0, "ada")])
    by_name = mysql_db.many(table, "name", columns=["id"], order_by="id")
    await batch(by_name, ["ada"])  # the pool is up, the column learnt
    rows = mysql_db._rows

    async def slow(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.2)
        return await rows(*args, **kwargs)

    monkeypatch.setattr(mysql_db, "_rows", slow)
    monkeypatch.setattr(mysql_db, "timeout", 0.3)
    got = await batch(by_name, ["ada", 1, 1.5])
    assert all(isinstance(v, mysql.QueryInterruptedError) for v in got[1:]), got
    await mysql_db.execute(f"DROP TABLE {table}")
