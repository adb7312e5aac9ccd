"""The blog on real servers (50 posts x 20 comments, MariaDB): naive, batchy, aiodataloader, cache.

Queries are the statements MariaDB received (its ``Questions`` counter on every
pool connection), not what our code thinks it sent. Every peer uses the same
aiomysql pool and the same SQL. Run: ``python -m benchmarks datasources``.
Servers: ``BATCHY_BENCH_MYSQL`` (default ``mysql://root@127.0.0.1:3306/test``) and
``BATCHY_BENCH_MEMCACHE`` (default ``127.0.0.1:11211``).
"""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiodataloader import DataLoader

import batchy
from benchmarks._util import fmt_ms, ratio, table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "blog"))
import blog_seed
import blog_views

from batchy_contrib import memcache, mysql

POSTS, COMMENTS, USERS = 50, 20, 100
POST_IDS = list(range(1, POSTS + 1))
MYSQL_URL = os.environ.get("BATCHY_BENCH_MYSQL", "mysql://root@127.0.0.1:3306/test")
MEMCACHE = os.environ.get("BATCHY_BENCH_MEMCACHE", "127.0.0.1:11211")
REPEAT = 9


# -- aiodataloader, written as its users write it -------------------------------------


class PeerLoaders:
    """One DataLoader per table, made per request; same SQL and pool as batchy's loaders."""

    def __init__(self, db: mysql.Database) -> None:
        self.batch_calls = 0
        self.posts = DataLoader(self._by_id(db, "blog_posts"))
        self.comments = DataLoader(self._by_id(db, "blog_comments"))
        self.users = DataLoader(self._by_id(db, "blog_users"))
        self.comment_ids = DataLoader(self._comment_ids(db))

    def _by_id(self, db: mysql.Database, table: str) -> Callable[[list[int]], Awaitable[Any]]:
        async def batch_load_fn(ids: list[int]) -> list[Any]:
            self.batch_calls += 1
            marks = ", ".join(["%s"] * len(ids))
            rows = await db.fetch(f"SELECT * FROM `{table}` WHERE `id` IN ({marks})", ids)
            by_id = {r["id"]: r for r in rows}
            return [by_id.get(i) for i in ids]

        return batch_load_fn

    def _comment_ids(self, db: mysql.Database) -> Callable[[list[int]], Awaitable[Any]]:
        async def batch_load_fn(post_ids: list[int]) -> list[Any]:
            self.batch_calls += 1
            marks = ", ".join(["%s"] * len(post_ids))
            rows = await db.fetch(
                f"SELECT post_id, id FROM blog_comments WHERE post_id IN ({marks}) ORDER BY id",
                post_ids,
            )
            grouped: dict[int, list[int]] = {p: [] for p in post_ids}
            for r in rows:
                grouped[r["post_id"]].append(r["id"])
            return [grouped[p] for p in post_ids]

        return batch_load_fn


async def peer_comment(loaders: PeerLoaders, cid: int) -> Any:
    comment = await loaders.comments.load(cid)
    author = await loaders.users.load(comment["user_id"])
    return {**comment, "author": author}


async def peer_post(loaders: PeerLoaders, pid: int) -> Any:
    post, cids = await asyncio.gather(loaders.posts.load(pid), loaders.comment_ids.load(pid))
    comments = await asyncio.gather(*(peer_comment(loaders, c) for c in cids))
    return {**post, "comments": list(comments)}


async def render_peer(db: mysql.Database) -> tuple[list[Any], int]:
    loaders = PeerLoaders(db)
    page = await asyncio.gather(*(peer_post(loaders, p) for p in POST_IDS))
    return list(page), loaders.batch_calls


# -- measuring ------------------------------------------------------------------------


class Counter(batchy.Hook):
    def __init__(self) -> None:
        self.rounds = 0
        self.calls = 0

    def round_started(self, event: batchy.RoundEvent) -> None:
        self.rounds += 1

    def batch_flushed(self, event: batchy.BatchEvent) -> None:
        self.calls += 1


def reachable(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


async def timed(render: Callable[[], Awaitable[Any]], setup: Callable[[], Any] | None) -> float:
    """Median wall time of ``render()`` over REPEAT runs (after one warm-up); ``setup`` untimed."""
    times = []
    for i in range(REPEAT + 1):
        if setup is not None:
            setup()
        gc.collect()
        start = time.perf_counter()
        await render()
        if i:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


async def run() -> None:
    url = urlsplit(MYSQL_URL)
    if not reachable(f"{url.hostname}:{url.port or 3306}"):
        print(f"skipped: MariaDB not reachable at {url.hostname}:{url.port or 3306}")
        return
    db = await mysql.connect(MYSQL_URL, minsize=4, maxsize=4)
    await blog_seed.seed(db, users=USERS, posts=POSTS, comments=COMMENTS)
    blog = blog_views.loaders(db)
    expected = await blog_views.render_naive(db, POST_IDS)
    rows: list[list[Any]] = []
    medians: dict[str, float] = {}

    async def measure(
        name: str,
        render: Callable[[], Awaitable[Any]],
        setup: Callable[[], Any] | None = None,
        mc: Any = None,
    ) -> None:
        if setup is not None:
            setup()
        counter = Counter()
        before = await db.questions()
        mc_before = mc.stats() if mc is not None else None
        with batchy.hooked(counter):
            result = await render()
        queries = await db.questions() - before
        page, calls = result if isinstance(result, tuple) else (result, counter.calls)
        assert page == expected, f"{name} rendered a different page"
        hits = "-"
        if mc is not None and mc_before is not None:
            after = mc.stats()
            hits = (
                f"{after[b'get_hits'] - mc_before[b'get_hits']}/"
                f"{after[b'get_misses'] - mc_before[b'get_misses']}"
            )
        medians[name] = await timed(render, setup)
        rows.append(
            [name, queries, calls or "-", counter.rounds or "-", hits, fmt_ms(medians[name])]
        )

    await measure("naive", lambda: blog_views.render_naive(db, POST_IDS))
    await measure("aiodataloader", lambda: render_peer(db))
    await measure("batchy", lambda: blog_views.render_batchy(blog, POST_IDS))

    if reachable(MEMCACHE):
        client = memcache.connect(MEMCACHE)
        fronted: list[blog_views.Blog] = []

        def cold() -> None:  # a fresh namespace: nothing cached yet
            fronted[:] = [blog_views.cached(blog, client, namespace=f"b{uuid.uuid4().hex}")]

        await measure(
            "batchy + memcached cold",
            lambda: blog_views.render_batchy(fronted[0], POST_IDS),
            cold,
            client,
        )
        warm = blog_views.cached(blog, client, namespace=f"b{uuid.uuid4().hex}")
        await blog_views.render_batchy(warm, POST_IDS)
        await measure(
            "batchy + memcached warm",
            lambda: blog_views.render_batchy(warm, POST_IDS),
            None,
            client,
        )
    else:
        print(f"(memcached not reachable at {MEMCACHE}: cache rows skipped)")
    await db.close()

    print(
        table(
            f"blog on MariaDB at {db.host}: {POSTS} posts x {COMMENTS} comments, median of "
            f"{REPEAT}; queries = MariaDB Questions, mc = memcached get hits/misses",
            ["render", "queries", "batch calls", "rounds", "mc hits/misses", "median"],
            rows,
        )
    )
    print(
        f"batchy vs aiodataloader: {ratio(medians['aiodataloader'], medians['batchy'])} "
        f"faster; vs naive: {ratio(medians['naive'], medians['batchy'])} faster"
    )


def main() -> None:
    asyncio.run(run())


if __name__ == "__main__":
    main()
