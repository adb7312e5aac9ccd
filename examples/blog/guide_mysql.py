"""The MySQL guide's example (docs/guides/20-mysql.rst): loaders over an aiomysql pool.

python examples/blog/guide_mysql.py mysql://root@127.0.0.1:3306/test
"""

import asyncio
import sys
import warnings

import batchy
from batchy.testing import record
from batchy_contrib.sql import mysql

# aiomysql turns the server's notes ("Unknown table" on DROP IF EXISTS, a string key
# compared with an INT column) into Python warnings; they are harmless here.
warnings.filterwarnings("ignore", module="aiomysql")


async def main(url: str) -> None:
    db = await mysql.connect(url, maxsize=4)  # autocommit pool; 10 s timeout per batch call
    await db.execute("DROP TABLE IF EXISTS guide_users")
    await db.execute("CREATE TABLE guide_users (id INT PRIMARY KEY, name VARCHAR(50))")
    await db.executemany("INSERT INTO guide_users VALUES (%s, %s)", [(1, "ada"), (2, "bob")])

    users_by_id = db.one("guide_users", max_batch_size=1000)

    @batchy.task
    async def greeting(uid: int) -> str:
        user = await users_by_id(uid)
        return f"hello {user['name']}" if user else f"no user {uid}"

    before = await db.questions()  # read from the server's own counters
    with record() as rec:
        async with batchy.scope():
            print(await batchy.gather(greeting(1), greeting(2), greeting(3)))
    print("keys per call:", rec.calls(users_by_id))
    print("statements the server received:", await db.questions() - before)

    users_by_name = db.one("guide_users", "name")
    try:  # a key is always a bound parameter, never SQL
        async with batchy.scope():
            print(await users_by_name("ada' OR '1'='1"))
    finally:
        await db.execute("DROP TABLE guide_users")
        await db.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "mysql://root@127.0.0.1:3306/test"))
