"""A blog page, rendered naively (2 + 2N queries per post) and with batchy (4 calls in 3 rounds).

The page shows posts, each with its comments, each comment with its author.
The data lives in an in-memory store whose queries sleep for a simulated round
trip, so you can run this anywhere: ``make demo``, or::

    python examples/blog.py --posts 50 --comments 20 --latency 0.5

It exits with status 1 if batchy renders a different page than the naive code,
or needs more batch calls or rounds than expected.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import batchy
from batchy.testing import Recorder, record

Row = dict[str, Any]


# -- the store: three tables and a counter of queries ------------------------------------


class Store:
    """Posts, comments and users in dicts; every query costs one (simulated) round trip."""

    def __init__(self, posts: int, comments: int, users: int, latency_ms: float) -> None:
        rng = random.Random(2016)
        self.latency = latency_ms / 1000
        self.queries = 0
        tables: dict[str, dict[int, Any]] = {
            "posts": {},
            "comment_ids": {},  # post id -> the ids of its comments
            "comments": {},
            "users": {uid: {"id": uid, "name": f"user{uid}"} for uid in range(1, users + 1)},
        }
        for pid in range(1, posts + 1):
            first = (pid - 1) * comments + 1
            cids = list(range(first, first + comments))
            tables["posts"][pid] = {"id": pid, "title": f"Post {pid}"}
            tables["comment_ids"][pid] = cids
            for cid in cids:
                user_id = rng.randint(1, users)
                tables["comments"][cid] = {"id": cid, "user_id": user_id, "text": f"#{cid}"}
        self.tables = tables

    def query(self, table: str, ids: list[int]) -> list[Any]:
        """``SELECT ... WHERE id IN (ids)``, blocking: rows in the order of ``ids``."""
        self.queries += 1
        if self.latency:
            time.sleep(self.latency)
        return [self.tables[table][i] for i in ids]

    async def aquery(self, table: str, ids: list[int]) -> list[Any]:
        """The same query through an async driver: the event loop runs on meanwhile."""
        self.queries += 1
        if self.latency:
            await asyncio.sleep(self.latency)
        return [self.tables[table][i] for i in ids]


db: Store  # set by main()


# -- naive: one query per row ------------------------------------------------------------


def get_comment(cid: int) -> Row:
    comment = db.query("comments", [cid])[0]
    author = db.query("users", [comment["user_id"]])[0]
    return {**comment, "author": author}


def get_post(pid: int) -> Row:
    post = db.query("posts", [pid])[0]
    cids = db.query("comment_ids", [pid])[0]
    comments = [get_comment(c) for c in cids]
    return {**post, "comments": comments}


# -- batchy: loaders take a list of keys and return one value per key, in order ---------


@batchy.batched
async def posts_by_id(ids: list[int]) -> list[Row]:
    return await db.aquery("posts", ids)


@batchy.batched
async def comment_ids_by_post(post_ids: list[int]) -> list[list[int]]:
    return await db.aquery("comment_ids", post_ids)


@batchy.batched
def comments_by_id(ids: list[int]) -> list[Row]:  # a plain def works too
    return db.query("comments", ids)


@batchy.batched(max_batch_size=500)
async def users_by_id(ids: list[int]) -> list[Row]:
    return await db.aquery("users", ids)


# -- batchy: handlers read like the naive code, one key at a time ------------------------


@batchy.task
def comment_view(cid: int):
    comment = yield comments_by_id(cid)  # a loader called with one key gives a future
    author = yield users_by_id(comment["user_id"])
    return {**comment, "author": author}


@batchy.task
def post_view(pid: int):
    post, cids = yield posts_by_id(pid), comment_ids_by_post(pid)  # a tuple: both at once
    comments = yield [comment_view(c) for c in cids]  # a list of sub-tasks
    return {**post, "comments": comments}


# The same handler as an async def: it shares batches with generator handlers.
@batchy.task
async def post_view_async(pid: int) -> Row:
    post, cids = await batchy.gather(posts_by_id(pid), comment_ids_by_post(pid))
    comments = await batchy.gather(*(comment_view(c) for c in cids))
    return {**post, "comments": comments}


# -- rendering the page three ways -------------------------------------------------------


def render_naive(pids: list[int]) -> list[Row]:
    return [get_post(p) for p in pids]


def render_batchy(pids: list[int]) -> list[Row]:
    # The sync entry point: runs an event loop for the duration of the call.
    return batchy.run(batchy.gather(*(post_view(p) for p in pids)))


def render_batchy_async(pids: list[int]) -> list[Row]:
    async def page() -> list[Row]:
        # Inside a running event loop, tasks are awaited; the scope holds loader caches.
        async with batchy.scope():
            return await batchy.gather(*(post_view_async(p) for p in pids))

    return asyncio.run(page())


@dataclass
class Run:
    """One rendering of the page: the result and what it cost."""

    page: list[Row]
    queries: int  # counted by the store
    seconds: float
    rec: Recorder  # the rounds and batch calls batchy made


def measure(render: Callable[[list[int]], list[Row]], pids: list[int]) -> Run:
    db.queries = 0
    with record() as rec:
        started = time.perf_counter()
        page = render(pids)
        seconds = time.perf_counter() - started
    return Run(page, db.queries, seconds, rec)


def check(naive: Run, runs: dict[str, Run]) -> list[str]:
    """What went wrong: a page that differs, or more calls or rounds than the page needs."""
    # Posts and comment ids together, then comments, then authors (500 users a call).
    authors = {c["user_id"] for c in db.tables["comments"].values()}
    want_calls, want_rounds = 3 + math.ceil(len(authors) / 500), 3
    problems = []
    for label, run in runs.items():
        if run.page != naive.page:
            problems.append(f"{label}: the page differs from the naive one")
        calls = len(run.rec.batches)
        if calls != want_calls or run.rec.rounds != want_rounds:
            problems.append(
                f"{label}: {calls} calls in {run.rec.rounds} rounds, expected "
                f"{want_calls} calls in {want_rounds} rounds\n{run.rec.report()}"
            )
    return problems


def print_report(args: argparse.Namespace, naive: Run, runs: dict[str, Run]) -> None:
    print(
        f"A page of {args.posts} posts x {args.comments} comments ({args.latency:g} ms per query)\n"
    )
    print(f"{'':22}{'queries':>9}{'round trips':>13}{'wall time':>12}")
    rows = [("naive, row by row", naive, naive.queries)]
    rows += [(label, run, run.rec.rounds) for label, run in runs.items()]
    for label, run, trips in rows:
        print(f"{label:22}{run.queries:>9}{trips:>13}{run.seconds * 1000:>9.1f} ms")
    print("\nThe batch calls batchy made, round by round:")
    print(runs["batchy, generators"].rec.report())
    print(
        f"\nNaive code needs 2 + 2N queries per post (N comments): "
        f"{args.posts} x (2 + 2 x {args.comments}) = {naive.queries}."
    )


def count(minimum: float, kind: type = int) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        value = kind(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=count(1), default=50, help="posts on the page (50)")
    parser.add_argument("--comments", type=count(1), default=20, help="comments per post (20)")
    parser.add_argument("--users", type=count(1), default=200, help="users who comment (200)")
    parser.add_argument(
        "--latency", type=count(0, float), default=0.5, help="milliseconds per query (0.5)"
    )
    parser.add_argument("--quiet", action="store_true", help="print one line")
    args = parser.parse_args(argv)

    global db
    db = Store(args.posts, args.comments, args.users, args.latency)
    pids = list(range(1, args.posts + 1))

    naive = measure(render_naive, pids)
    runs = {
        "batchy, generators": measure(render_batchy, pids),
        "batchy, async def": measure(render_batchy_async, pids),
    }
    problems = check(naive, runs)

    if args.quiet:
        rec = runs["batchy, generators"].rec
        print(
            f"blog: naive {naive.queries} queries; batchy {len(rec.batches)} calls "
            f"in {rec.rounds} rounds; {'FAILED' if problems else 'same page'}"
        )
    else:
        print_report(args, naive, runs)
        if not problems:
            print("Both batchy versions rendered the same page as the naive code.")
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
