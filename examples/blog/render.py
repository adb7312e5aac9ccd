"""Render the blog naively, with batchy, and with memcached in front; count what the servers saw.

::

    python examples/blog/render.py        # SQLite in a temp dir, no server needed
    python examples/blog/render.py --mysql mysql://root@127.0.0.1:3306/test \
        --memcache 127.0.0.1:11211
    python examples/blog/render.py --postgres postgresql://postgres@127.0.0.1:5432/test

Queries are counted by the database, not by this script: on MySQL/MariaDB from
the server's ``Questions`` status counter of each pool connection, on SQLite by
SQLite's own trace callback (every statement it runs), on PostgreSQL, which
keeps no such counter, on the wire: the script talks to the server through a
proxy (``pg_statements.py``) that counts the statements it receives.
memcached hits and misses come from memcached's ``stats``. Exits with status 1 if a render differs
from the naive page or batchy needs more than 4 queries or 3 rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import blog_seed
import blog_views

import batchy


class Rounds(batchy.Hook):
    """Counts the rounds batchy flushes."""

    def __init__(self) -> None:
        self.count = 0

    def round_started(self, event: batchy.RoundEvent) -> None:
        self.count += 1


class SQLiteStatements:
    """SQLite's trace callback: called by SQLite with every statement it runs."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def __call__(self, statement: str) -> None:
        with self._lock:
            self.count += 1


async def open_db(args: argparse.Namespace) -> tuple[Any, Any, str]:
    """(database, an async function reading the server's statement count, a description)."""
    if args.mysql:
        from batchy_contrib.sql import mysql

        db = await mysql.connect(args.mysql, minsize=4, maxsize=4)
        how = f"MariaDB/MySQL at {db.host}; queries = server's Questions counter"
        return db, db.questions, how
    if args.postgres:
        from urllib.parse import urlsplit

        from pg_statements import StatementCounter

        from batchy_contrib.sql import postgres

        server = urlsplit(args.postgres)
        counter = StatementCounter(server.hostname or "127.0.0.1", server.port or 5432)
        db = await postgres.connect(counter.url(args.postgres), min_size=4, max_size=4)

        async def received() -> int:
            return counter.count

        where = f"{server.hostname}:{server.port or 5432}"
        return db, received, f"PostgreSQL at {where}; queries = statements received, on the wire"
    from batchy_contrib.sql import sqlite

    traced = SQLiteStatements()
    path = args.sqlite or os.path.join(tempfile.mkdtemp(prefix="batchy-blog-"), "blog.db")
    db = sqlite.Database(path, trace=traced)

    async def statements() -> int:
        return traced.count

    return db, statements, f"SQLite at {path}; queries = SQLite's trace callback"


async def ensure_seeded(db: Any, args: argparse.Namespace) -> bool:
    try:
        (row,) = await db.fetch("SELECT COUNT(*) AS n FROM blog_posts")
        enough = int(row["n"]) >= args.posts
    except Exception:
        enough = False
    if enough and not args.seed:
        return False
    await blog_seed.seed(db, users=args.users, posts=args.posts, comments=args.comments)
    return True


def memcached_counts(client: Any) -> tuple[int, int]:
    stats = client.stats()
    return int(stats[b"get_hits"]), int(stats[b"get_misses"])


async def measure(name: str, render: Any, questions: Any, client: Any = None) -> dict[str, Any]:
    rounds = Rounds()
    before = await questions()
    mc_before = memcached_counts(client) if client is not None else None
    with batchy.hooked(rounds):
        start = time.perf_counter()
        page = await render()
        wall = time.perf_counter() - start
    row: dict[str, Any] = {
        "mode": name,
        "queries": await questions() - before,
        "rounds": rounds.count if rounds.count else "-",
        "hits": "-",
        "misses": "-",
        "ms": wall * 1000,
        "page": page,
    }
    if client is not None and mc_before is not None:
        hits, misses = memcached_counts(client)
        row["hits"], row["misses"] = hits - mc_before[0], misses - mc_before[1]
    return row


async def amain(args: argparse.Namespace) -> int:
    db, questions, how = await open_db(args)
    try:
        if await ensure_seeded(db, args) and not args.quiet:
            print(f"seeded {args.users} users, {args.posts} posts x {args.comments} comments")
        post_ids = list(range(1, args.posts + 1))
        blog = blog_views.loaders(db)
        rows = [
            await measure("naive", lambda: blog_views.render_naive(db, post_ids), questions),
            await measure("batchy", lambda: blog_views.render_batchy(blog, post_ids), questions),
        ]
        if args.memcache:
            from batchy_contrib.cache import memcache

            client = memcache.connect(args.memcache)
            # A fresh namespace: the first render is cold whatever the cache holds.
            fronted = blog_views.cached(blog, client, namespace=f"blog:{uuid.uuid4().hex[:8]}")
            for label in ("cold", "warm"):
                rows.append(
                    await measure(
                        f"batchy + memcached {label}",
                        lambda: blog_views.render_batchy(fronted, post_ids),
                        questions,
                        client,
                    )
                )
    finally:
        await db.close()

    if not args.quiet:
        print(f"blog: {args.posts} posts x {args.comments} comments on {how}")
        print(f"{'mode':<26}{'queries':>8}{'rounds':>8}{'mc hits':>9}{'mc misses':>11}{'wall':>12}")
        for r in rows:
            print(
                f"{r['mode']:<26}{r['queries']:>8}{r['rounds']!s:>8}{r['hits']!s:>9}"
                f"{r['misses']!s:>11}{r['ms']:>9.1f} ms"
            )
        if not args.memcache:
            print("(pass --memcache HOST:PORT to add memcached in front)")
    problems = [r["mode"] for r in rows[1:] if r["page"] != rows[0]["page"]]
    if problems:
        print(f"FAIL: {', '.join(problems)} rendered a different page than naive code")
    if rows[1]["queries"] > 4 or rows[1]["rounds"] > 3:
        problems.append("batchy")
        print(f"FAIL: batchy needed {rows[1]['queries']} queries in {rows[1]['rounds']} rounds")
    return 1 if problems else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--mysql", metavar="URL", help="e.g. mysql://root@127.0.0.1:3306/test")
    where.add_argument(
        "--postgres", metavar="URL", help="e.g. postgresql://postgres@127.0.0.1:5432/test"
    )
    where.add_argument("--sqlite", metavar="PATH", help="SQLite file (default: a temp file)")
    parser.add_argument("--memcache", metavar="HOST:PORT", help="put memcached in front")
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--posts", type=int, default=50)
    parser.add_argument("--comments", type=int, default=20, help="comments per post")
    parser.add_argument("--seed", action="store_true", help="re-create the tables first")
    parser.add_argument("--quiet", action="store_true", help="print nothing unless it fails")
    sys.exit(asyncio.run(amain(parser.parse_args())))


if __name__ == "__main__":
    main()
