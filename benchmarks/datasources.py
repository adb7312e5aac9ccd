"""The blog on real databases: naive, batchy, aiodataloader and memcached, async and sync.

Three tables. The first renders the 50 posts x 20 comments page on MariaDB
naively, with batchy, with aiodataloader and with memcached in front. The
second puts batchy against aiodataloader at 50x20 and 500x20, on MariaDB,
PostgreSQL and SQLite, on both paths an app has: *async*, every page in one
long-lived event loop (an ASGI server), and *sync*, a new loop per page
(``batchy.run`` / ``asyncio.run`` in a Flask view) over a database declared
once (``mysql.Database.from_url``, ``postgres.Database.from_url``,
``sqlite.Database``), which opens a pool per loop. Its target: one statement
per loader per round on every path, and batchy at least as fast as
aiodataloader on every row. The third is what matching rows to text keys on
the server costs on MariaDB and PostgreSQL (benchmarks/_matching.py): at most
10% over matching them in Python.

Queries are what the database ran (MariaDB's ``Questions`` counter on every
pool connection, SQLite's trace callback, the statements PostgreSQL received
as counted on the wire by examples/blog/pg_statements.py), not what our code
thinks it sent. Every peer uses the same database object and the same SQL.
Run: ``python -m benchmarks datasources``, or ``python -m benchmarks.datasources
PostgreSQL`` for the comparison on the stores named. Servers:
``BATCHY_BENCH_MYSQL`` (default ``mysql://root@127.0.0.1:3306/test``),
``BATCHY_BENCH_PG`` (default ``postgresql://postgres@127.0.0.1:5432``; the
blog goes in a database of its own, dropped at the end) and
``BATCHY_BENCH_MEMCACHE`` (default ``127.0.0.1:11211``).
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import batchy
from benchmarks._blog_peer import render_peer
from benchmarks._util import fmt_ms, median_times, ratio, table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "blog"))
import blog_seed
import blog_views

from batchy_contrib.cache import memcache
from batchy_contrib.sql import mysql, postgres, sqlite
from benchmarks import _matching, _postgres_blog

POSTS, COMMENTS, USERS = 50, 20, 100
POST_IDS = list(range(1, POSTS + 1))
#: The comparison's pages: posts per page (20 comments each); 500 posts are seeded.
PAGES = {"50x20": 50, "500x20": 500}
SEEDED = max(PAGES.values())
#: Keys per statement for the comparison: the 500x20 page loads 10,000 comments
#: in one round, one statement for batchy as for aiodataloader (unbounded batches).
BIG_BATCH = 10_000
MYSQL_URL = os.environ.get("BATCHY_BENCH_MYSQL", "mysql://root@127.0.0.1:3306/test")
MEMCACHE = os.environ.get("BATCHY_BENCH_MEMCACHE", "127.0.0.1:11211")
REPEAT = 9


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
    await blog_seed.seed(db, users=USERS, posts=SEEDED, comments=COMMENTS)
    blog = blog_views.loaders(db)
    expected = await blog_views.render_naive(db, POST_IDS)
    rows: list[list[Any]] = []
    medians: dict[str, float] = {}

    async def measure(
        name: str,
        render: Callable[[], Awaitable[Any]],
        setup: Callable[[], Any] | None = None,
        mc: Any = None,
        *,
        later: bool = False,
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
        if later:  # timed below, interleaved with the other peers
            interleaved[name] = render
        else:
            medians[name] = await timed(render, setup)
        rows.append([name, queries, calls or "-", counter.rounds or "-", hits, name])

    interleaved: dict[str, Callable[[], Awaitable[Any]]] = {}
    await measure("naive", lambda: blog_views.render_naive(db, POST_IDS), later=True)
    await measure("aiodataloader", lambda: render_peer(db, POST_IDS), later=True)
    await measure("batchy", lambda: blog_views.render_batchy(blog, POST_IDS), later=True)
    # Round-robin, so a burst of load elsewhere on the machine hits all three alike.
    medians.update(await amedian_times(interleaved))

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

    for row in rows:
        row[-1] = fmt_ms(medians[row[-1]])
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


# -- batchy vs aiodataloader: two stores, two page sizes, async and sync ----------------


class Trace:
    """SQLite's trace callback: counts the statements SQLite runs."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, statement: str) -> None:
        self.count += 1


async def ran(db: Any) -> int:
    """Statements the database has run so far, counted by the database (PostgreSQL: received)."""
    if isinstance(db, mysql.Database):
        return await db.questions()
    if isinstance(db, postgres.Database):
        return _postgres_blog.received(db)
    return int(db.trace.count)


async def counted(db: Any, render: Callable[[], Awaitable[Any]]) -> tuple[Any, int, int]:
    """``render()``'s page, the statements the database ran for it, and batchy's rounds."""
    counter = Counter()
    before = await ran(db)
    with batchy.hooked(counter):
        result = await render()
    return result, await ran(db) - before, counter.rounds


async def amedian_times(fns: dict[str, Callable[[], Awaitable[Any]]]) -> dict[str, float]:
    """Median times of several renders in this loop, interleaved round-robin after a warm-up."""
    for fn in fns.values():
        await fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(REPEAT):
        for name, fn in fns.items():
            gc.collect()
            start = time.perf_counter()
            await fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def compare_row(
    db: Any, blog: blog_views.Blog, ids: list[int], counting: Any = None
) -> list[dict[str, Any]]:
    """Both paths for one store and page: queries (server-counted), rounds and medians.

    ``counting``: another database object over the same data that the queries
    are counted on (PostgreSQL's, behind the counting proxy, which ``db`` is
    not, so the proxy costs the timed renders nothing); by default ``db``.
    """
    count_db = counting or db
    count_blog = blog_views.loaders(count_db) if counting is not None else blog
    count_db.default_batch_size = db.default_batch_size

    def peer(on: Any = db) -> Awaitable[Any]:
        return render_peer(on, ids)

    def ours(on: blog_views.Blog = blog) -> Awaitable[Any]:
        return blog_views.render_batchy(on, ids)

    async def in_one_loop() -> dict[str, Any]:  # an ASGI server: every page in one loop
        (page, _), peer_queries, _ = await counted(count_db, lambda: peer(count_db))
        mine, queries, rounds = await counted(count_db, lambda: ours(count_blog))
        assert mine == page, "batchy rendered a different page"
        medians = await amedian_times({"aiodataloader": peer, "batchy": ours})
        return {"path": "async", "peer_q": peer_queries, "q": queries, "rounds": rounds, **medians}

    row = asyncio.run(in_one_loop())
    # Sync: each page in a new loop, as in a Flask view; counted inside that loop,
    # since a pool lives and dies with its loop.
    _, peer_queries, _ = asyncio.run(counted(count_db, lambda: peer(count_db)))
    _, queries, rounds = batchy.run(counted(count_db, lambda: ours(count_blog)))
    medians = median_times(
        {
            "aiodataloader": lambda: asyncio.run(render_peer(db, ids)),
            "batchy": lambda: batchy.run(
                batchy.gather(*(blog_views.post_view(blog, p) for p in ids))
            ),
        },
        repeat=REPEAT,
    )
    sync = {"path": "sync", "peer_q": peer_queries, "q": queries, "rounds": rounds, **medians}
    return [row, sync]


def compare(only: list[str] | None = None) -> None:
    """The comparison on every store reachable (or those named in ``only``)."""
    stores: list[tuple[str, Any, Any]] = []  # (name, database, database to count on)
    url = urlsplit(MYSQL_URL)
    if (only is None or "MariaDB" in only) and reachable(f"{url.hostname}:{url.port or 3306}"):
        # Declared once, as a module would; run() seeded its tables.
        db = mysql.Database.from_url(MYSQL_URL, maxsize=4)
        if only is not None:
            batchy.run(blog_seed.seed(db, users=USERS, posts=SEEDED, comments=COMMENTS))
        stores.append(("MariaDB", db, None))
    pg = None
    if only is None or "PostgreSQL" in only:
        pg = _postgres_blog.blog_database(users=USERS, posts=SEEDED, comments=COMMENTS)
        if pg is not None:
            stores.append(("PostgreSQL", pg.db, pg.counted))
    tmp = tempfile.mkdtemp(prefix="batchy-bench-")
    lite = sqlite.Database(f"{tmp}/blog.db", trace=Trace())
    if only is None or "SQLite" in only:
        batchy.run(blog_seed.seed(lite, users=USERS, posts=SEEDED, comments=COMMENTS))
        stores.append(("SQLite", lite, None))
    rows: list[list[Any]] = []
    slower: list[str] = []
    off_target: list[str] = []
    try:
        for store, db, counting in stores:
            db.default_batch_size = BIG_BATCH
            blog = blog_views.loaders(db)  # module-level loaders, shared by every page
            for page, posts in PAGES.items():
                for r in compare_row(db, blog, list(range(1, posts + 1)), counting):
                    name = f"{store} {page} {r['path']}"
                    rows.append(
                        [
                            store,
                            page,
                            r["path"],
                            r["peer_q"],
                            r["q"],
                            r["rounds"],
                            fmt_ms(r["aiodataloader"]),
                            fmt_ms(r["batchy"]),
                            ratio(r["aiodataloader"], r["batchy"]),
                        ]
                    )
                    if r["batchy"] > r["aiodataloader"]:
                        slower.append(name)
                    if r["q"] != len(blog.all()):
                        off_target.append(name)
        matching = [_matching.matching_cost(db, s) for s, db, _ in stores if s in _matching.CREATE]
    finally:
        lite.close_now()
        shutil.rmtree(tmp, ignore_errors=True)
        if pg is not None:
            pg.drop()
    print(
        table(
            f"batchy vs aiodataloader, median of {REPEAT}: async = every page in one event "
            "loop; sync = a new loop per page (batchy.run / asyncio.run), database declared "
            "once; queries = MariaDB Questions / PostgreSQL statements received / SQLite trace",
            [
                "store",
                "page",
                "path",
                "queries aiodl",
                "queries batchy",
                "rounds",
                "aiodataloader",
                "batchy",
                "batchy faster",
            ],
            rows,
        )
    )
    print(
        f"target: {len(blog.all())} queries (one per loader per round) on every row -> "
        + ("PASS" if not off_target else f"FAIL ({', '.join(off_target)})")
    )
    print(
        "target: batchy at least as fast as aiodataloader on every row -> "
        + ("PASS" if not slower else f"FAIL ({', '.join(slower)})")
    )
    for cost, met in matching:
        print(cost)
        print("target: matching on the server at most +10% -> " + ("PASS" if met else "FAIL"))


def main() -> None:
    asyncio.run(run())
    compare()


if __name__ == "__main__":
    if sys.argv[1:]:
        compare(sys.argv[1:])
    else:
        main()
