"""The SQLite guide's example (docs/guides/21-sqlite.rst): loaders over a file, no server."""

import asyncio
import sys
import tempfile
from dataclasses import dataclass

import batchy
from batchy_contrib.sql import sqlite


@dataclass
class User:
    id: int
    name: str


async def main(path: str) -> None:
    db = sqlite.Database(path)  # statements run on worker threads, not the event loop
    await db.executescript(
        """
        CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE posts (id INTEGER PRIMARY KEY, user_id INTEGER, title TEXT);
        INSERT INTO users VALUES (1, 'ada'), (2, 'bob');
        INSERT INTO posts VALUES (10, 1, 'Hello'), (11, 1, 'Again'), (12, 2, 'Hi');
        """
    )
    users_by_id = db.one("users", row=User)  # one User (or None) per key
    posts_by_user = db.many("posts", "user_id", order_by="-id")  # a list per key
    post_counts = db.query(  # your own SQL: {keys} becomes the bound IN list
        "SELECT user_id, COUNT(*) AS n FROM posts WHERE user_id IN {keys} GROUP BY user_id",
        key="user_id",
        row=lambda user_id, n: n,
    )

    @batchy.task
    async def profile(uid: int) -> dict[str, object]:
        user, posts, count = await batchy.gather(
            users_by_id(uid), posts_by_user(uid), post_counts(uid)
        )
        return {"user": user, "titles": [p["title"] for p in posts], "posts": count}

    async with batchy.scope():
        pages = await batchy.gather(profile(1), profile(2), profile(3))
    for page in pages:
        print(page)
    await db.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else f"{tmp}/guide.db"))
