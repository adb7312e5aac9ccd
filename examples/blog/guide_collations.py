"""The collation example of the SQL guides (docs/guides: 20-mysql, 21-sqlite, 24-postgres).

A key finds the rows the database considers equal to it, under the column's
collation: 'ADA' finds 'ada' in a case-insensitive column, and 'ADA' and 'ada'
in one batch both find it. db.query() matches in Python, so it does not.

python examples/blog/guide_collations.py                      # SQLite only
python examples/blog/guide_collations.py mysql://root@127.0.0.1:3306/test
python examples/blog/guide_collations.py postgresql://postgres@127.0.0.1:5432/test
"""

import asyncio
import sys
import tempfile
import warnings
from typing import Any

import batchy
from batchy_contrib.sql import mysql, postgres, sqlite

warnings.filterwarnings("ignore", module="aiomysql")  # "Unknown table" on DROP IF EXISTS

KEYS = ["ADA", "ada", "trail", "zed"]


async def main(db: Any, collation: str) -> None:
    p = db.dialect.param
    await db.execute("DROP TABLE IF EXISTS guide_names")
    await db.execute(
        f"CREATE TABLE guide_names (id INTEGER PRIMARY KEY, name VARCHAR(20) {collation})"
    )
    await db.executemany(f"INSERT INTO guide_names VALUES ({p}, {p})", [(1, "ada"), (2, "traíl")])

    by_name = db.one("guide_names", "name", row=lambda id, name: id)  # the id, or None
    by_name_in_python = db.query(  # your own SQL: rows are matched to keys with Python ==
        "SELECT id, name FROM guide_names WHERE name IN {keys}",
        key="name",
        row=lambda id, name: id,
    )
    async with batchy.scope():
        server = await batchy.gather(*(by_name(k) for k in KEYS))
        python = await batchy.gather(*(by_name_in_python(k) for k in KEYS))
    print(f"{db.kind:6} one():  ", dict(zip(KEYS, server, strict=True)))
    print(f"{db.kind:6} query():", dict(zip(KEYS, python, strict=True)))
    await db.execute("DROP TABLE guide_names")


async def on_postgres(url: str) -> None:
    db = await postgres.connect(url)
    # A nondeterministic ICU collation: strength 1 ignores case and accents.
    await db.execute(
        "CREATE COLLATION IF NOT EXISTS guide_ci_ai"
        " (provider = icu, locale = 'und-u-ks-level1', deterministic = false)"
    )
    try:
        await main(db, "COLLATE guide_ci_ai")
    finally:
        await db.execute("DROP COLLATION guide_ci_ai")
        await db.close()


async def every(path: str, urls: list[str]) -> None:
    lite = sqlite.Database(path)
    await main(lite, "COLLATE NOCASE")  # ASCII case only
    await lite.close()
    for url in urls:  # case- and accent-insensitive
        if url.startswith("postgres"):
            await on_postgres(url)
        else:
            db = await mysql.connect(url)
            await main(db, "COLLATE utf8mb4_unicode_ci")
            await db.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(every(f"{tmp}/guide.db", sys.argv[1:]))
