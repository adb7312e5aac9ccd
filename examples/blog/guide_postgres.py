"""The PostgreSQL guide's example (docs/guides/24-postgres.rst): loaders over a psycopg pool.

python examples/blog/guide_postgres.py postgresql://postgres@127.0.0.1:5432/test
"""

import asyncio
import sys

import batchy
from batchy.testing import record
from batchy_contrib.sql import postgres


async def main(url: str) -> None:
    db = await postgres.connect(url, max_size=4)  # autocommit pool; 10 s timeout per batch call
    await db.execute("DROP TABLE IF EXISTS guide_users")
    await db.execute("CREATE TABLE guide_users (id INT PRIMARY KEY, name VARCHAR(50))")
    await db.executemany("INSERT INTO guide_users VALUES (%s, %s)", [(1, "ada"), (2, "bob")])

    users_by_id = db.one("guide_users")  # the keys of a batch go as one array parameter

    @batchy.task
    async def greeting(uid: int) -> str:
        user = await users_by_id(uid)
        return f"hello {user['name']}" if user else f"no user {uid}"

    with record() as rec:
        async with batchy.scope():
            print(await batchy.gather(greeting(1), greeting(2), greeting(3)))
    print("keys per call:", rec.calls(users_by_id))

    users_by_name = db.one("guide_users", "name")
    try:
        async with batchy.scope():
            print(await users_by_name("ada' OR '1'='1"))  # a key is always data, never SQL
            print(await users_by_id("2"))  # read as the column's type: the integer 2
            try:
                await users_by_id("two")  # not an integer: this key fails, alone
            except postgres.KeyEncodingError as error:
                print(type(error).__name__, error.key)
    finally:
        await db.execute("DROP TABLE guide_users")
        await db.close()


if __name__ == "__main__":
    url = sys.argv[1] if len(sys.argv) > 1 else "postgresql://postgres@127.0.0.1:5432/test"
    asyncio.run(main(url))
