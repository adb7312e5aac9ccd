"""Create the blog's tables and fill them with deterministic fake data, on SQLite or MySQL.

::

    python examples/blog/blog_seed.py --sqlite /tmp/blog.db --posts 50 --comments 20
    python examples/blog/blog_seed.py --mysql mysql://root@127.0.0.1:3306/test --users 500
"""

from __future__ import annotations

import argparse
import asyncio
import random
import warnings
from pathlib import Path
from typing import Any

SCHEMA = Path(__file__).with_name("blog_schema.sql")
TABLES = ("blog_comments", "blog_posts", "blog_users")


def schema_statements() -> list[str]:
    """The statements of ``blog_schema.sql``, comments stripped."""
    text = "\n".join(
        line for line in SCHEMA.read_text().splitlines() if not line.lstrip().startswith("--")
    )
    return [s.strip() for s in text.split(";") if s.strip()]


async def create(db: Any) -> None:
    """Drop and re-create the blog tables."""
    with warnings.catch_warnings():  # MariaDB warns when a table to drop is missing
        warnings.simplefilter("ignore")
        for table in TABLES:
            await db.execute(f"DROP TABLE IF EXISTS {table}")
    for statement in schema_statements():
        await db.execute(statement)


async def seed(
    db: Any, *, users: int = 100, posts: int = 50, comments: int = 20, seed: int = 2016
) -> None:
    """Fresh tables with ``users`` users, ``posts`` posts and ``comments`` comments per post."""
    rng = random.Random(seed)
    p = db.dialect.param
    await create(db)
    await db.executemany(
        f"INSERT INTO blog_users (id, name) VALUES ({p}, {p})",
        [(uid, f"user{uid}") for uid in range(1, users + 1)],
    )
    await db.executemany(
        f"INSERT INTO blog_posts (id, user_id, title, body) VALUES ({p}, {p}, {p}, {p})",
        [
            (pid, rng.randint(1, users), f"Post {pid}", f"The text of post {pid}.")
            for pid in range(1, posts + 1)
        ],
    )
    rows = []
    cid = 0
    for pid in range(1, posts + 1):
        for _ in range(comments):
            cid += 1
            rows.append((cid, pid, rng.randint(1, users), f"Comment {cid} on post {pid}."))
    for start in range(0, len(rows), 1000):
        await db.executemany(
            f"INSERT INTO blog_comments (id, post_id, user_id, body) VALUES ({p}, {p}, {p}, {p})",
            rows[start : start + 1000],
        )


async def open_db(mysql_url: str | None, sqlite_path: str | None) -> Any:
    """A batchy_contrib database for ``--mysql URL`` or ``--sqlite PATH``."""
    if mysql_url:
        from batchy_contrib.sql import mysql

        return await mysql.connect(mysql_url, minsize=4, maxsize=4)
    from batchy_contrib.sql import sqlite

    return sqlite.Database(sqlite_path or "blog.db")


async def amain(args: argparse.Namespace) -> None:
    db = await open_db(args.mysql, args.sqlite)
    await seed(db, users=args.users, posts=args.posts, comments=args.comments)
    print(f"seeded {args.users} users, {args.posts} posts, {args.comments} comments per post")
    await db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--mysql", metavar="URL", help="mysql://user:password@host:port/db")
    where.add_argument("--sqlite", metavar="PATH", help="SQLite file (default: blog.db)")
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--posts", type=int, default=50)
    parser.add_argument("--comments", type=int, default=20, help="comments per post")
    asyncio.run(amain(parser.parse_args()))


if __name__ == "__main__":
    main()
