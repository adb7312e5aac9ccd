"""GraphQL feed query (50 posts x 20 comments): batchy vs strawberry's DataLoader vs aiodataloader.

Every contender runs the same graphql-core schema and query, the feed of the
GraphQL issue scaled up; only the resolvers' loading differs:

- **batchy async**: resolvers return batchy loader futures; ``await
  batchy_contrib.graphql.graphql(...)``.
- **batchy sync**: the same resolvers through ``graphql_sync`` (no loop in the caller).
- **batchy.DataLoader**: the DataLoader-compatible class, per-request instances.
- **strawberry DataLoader** / **aiodataloader**: per-request DataLoader instances,
  resolvers return ``loader.load(key)``; plain ``graphql.graphql(...)`` (graphql-core async).
- **graphql-core sync, no loaders** (a reference, not a peer): the same schema with
  every resolver answering from memory at once, on graphql-core's own sync
  executor: the floor of executing this query on graphql-core.

Batch functions answer at once (no I/O), so the time is the cost of execution and
batching. Rounds for the DataLoaders are the loop iterations in which batch calls ran.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import aiodataloader
import graphql as gql
import strawberry.dataloader

import batchy
from batchy.dataloader import DataLoader as BatchyDataLoader
from batchy.testing import record
from batchy_contrib import graphql as bgql

from ._util import fmt_ms, ratio, table

N_POSTS = 50
N_COMMENTS = 20
N_USERS = 100

USERS = {i: {"id": i, "name": f"user {i}"} for i in range(1, N_USERS + 1)}
POSTS = [{"id": p, "title": f"post {p}", "author_id": (p - 1) % 10 + 1} for p in range(1, 51)]
COMMENTS = {
    p: [
        {"id": c, "body": f"comment {c}", "author_id": (c - 1) % N_USERS + 1}
        for c in range(N_COMMENTS * (p - 1) + 1, N_COMMENTS * p + 1)
    ]
    for p in range(1, N_POSTS + 1)
}

SDL = """
type Query { viewer: User!, feed(first: Int = 10): [Post!]! }
type User { id: ID!, name: String! }
type Post { id: ID!, title: String!, author: User!, comments: [Comment!]! }
type Comment { id: ID!, body: String!, author: User! }
"""
QUERY = f"""{{
  viewer {{ id name }}
  feed(first: {N_POSTS}) {{
    id title author {{ id name }}
    comments {{ id body author {{ id name }} }}
  }}
}}"""


class Counter:
    """Counts batch calls and the loop iterations ("rounds") they ran in."""

    def __init__(self) -> None:
        self.calls = 0
        self.ticks: set[int] = set()
        self.tick = 0

    def hit(self) -> None:
        self.calls += 1
        self.ticks.add(self.tick)

    async def run(self, aw: Any) -> Any:
        loop = asyncio.get_running_loop()
        done = False

        def ticker() -> None:
            self.tick += 1
            if not done:
                loop.call_soon(ticker)

        loop.call_soon(ticker)
        try:
            return await aw
        finally:
            done = True


COUNTER = Counter()


async def load_users(ids: list[int]) -> list[Any]:
    COUNTER.hit()
    return [USERS.get(i) for i in ids]


async def load_feed(firsts: list[int]) -> list[Any]:
    COUNTER.hit()
    return [POSTS[:n] for n in firsts]


async def load_comments(post_ids: list[int]) -> list[Any]:
    COUNTER.hit()
    return [COMMENTS.get(p, []) for p in post_ids]


users_by_id = batchy.batched(load_users)
feed_posts = batchy.batched(load_feed)
comments_by_post = batchy.batched(load_comments)


def make_schema(get: Callable[[Any, str], Callable[[Any], Any]], uneven: bool = False) -> Any:
    """The schema, with resolvers that load through ``get(info, loader_name)(key)``.

    ``uneven``: resolvers of odd objects take two loop hops (``asyncio.sleep(0)``)
    before they load, as a permission check or a second await would.
    """
    schema = gql.build_schema(SDL)
    query = schema.query_type
    assert query is not None
    post = schema.get_type("Post")
    comment = schema.get_type("Comment")
    assert isinstance(post, gql.GraphQLObjectType)
    assert isinstance(comment, gql.GraphQLObjectType)

    def field(name: str, key: Callable[[Any], Any]) -> Callable[..., Any]:
        def resolve(obj: Any, info: Any, **args: Any) -> Any:
            k = key(obj) if not args else args["first"]
            if uneven and isinstance(obj, dict) and obj["id"] % 2:
                return hops(get(info, name), k)
            return get(info, name)(k)

        return resolve

    async def hops(load: Callable[[Any], Any], key: Any) -> Any:
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return await load(key)

    query.fields["viewer"].resolve = lambda root, info: get(info, "users")(1)
    query.fields["feed"].resolve = field("feed", lambda root: None)
    post.fields["author"].resolve = field("users", lambda obj: obj["author_id"])
    post.fields["comments"].resolve = field("comments", lambda obj: obj["id"])
    comment.fields["author"].resolve = field("users", lambda obj: obj["author_id"])
    return schema


BATCHY = {"users": users_by_id, "feed": feed_posts, "comments": comments_by_post}
IN_MEMORY = {
    "users": USERS.get,
    "feed": lambda n: POSTS[:n],
    "comments": lambda p: COMMENTS.get(p, []),
}
PLAIN_SCHEMA = make_schema(lambda info, name: IN_MEMORY[name])
SCHEMAS = {
    (kind, uneven): make_schema(
        (lambda info, name: BATCHY[name])
        if kind == "batchy"
        else (lambda info, name: info.context[name].load),
        uneven,
    )
    for kind in ("batchy", "context")
    for uneven in (False, True)
}


def loaders(cls: Any) -> dict[str, Any]:
    return {"users": cls(load_users), "feed": cls(load_feed), "comments": cls(load_comments)}


def check(result: gql.ExecutionResult) -> gql.ExecutionResult:
    if result.errors:
        raise RuntimeError(f"benchmark query failed: {result.errors[0]}")
    return result


def contenders(uneven: bool) -> dict[str, Callable[..., Any]]:
    ours = SCHEMAS["batchy", uneven]
    theirs = SCHEMAS["context", uneven]

    def on_loop(make: Callable[[], Any]) -> Callable[..., Any]:
        def run(tick: bool = False) -> None:
            # The ticker counts loop iterations for the DataLoaders' rounds; it
            # keeps the loop busy, so it runs only in the counting run.
            async def main() -> None:
                check(await (COUNTER.run(make()) if tick else make()))
                # Return nothing: on exit asyncio.run formats the repr of the
                # main task, result included, which for a response costs ~1 ms.

            asyncio.run(main())

        return run

    def their(cls: Any) -> Callable[..., Any]:
        return on_loop(lambda: gql.graphql(theirs, QUERY, context_value=loaders(cls)))

    return {
        "batchy async": on_loop(lambda: bgql.graphql(ours, QUERY)),
        "batchy sync": lambda tick=False: check(bgql.graphql_sync(ours, QUERY)),
        "batchy.DataLoader": on_loop(
            lambda: bgql.graphql(theirs, QUERY, context_value=loaders(BatchyDataLoader))
        ),
        "strawberry DataLoader": their(strawberry.dataloader.DataLoader),
        "aiodataloader": their(aiodataloader.DataLoader),
        "graphql-core sync, no loaders": lambda tick=False: check(
            gql.graphql_sync(PLAIN_SCHEMA, QUERY)
        ),
    }


def count(name: str, fn: Callable[..., Any]) -> tuple[int, int]:
    """Batch calls and rounds of one query."""
    global COUNTER
    COUNTER = Counter()
    ours = name.startswith("batchy")
    with record() as rec:
        fn(tick=not ours)
    if name.startswith("graphql-core"):
        return 0, 0  # no loaders
    return COUNTER.calls, rec.rounds if ours else len(COUNTER.ticks)


def main() -> None:
    even, uneven = contenders(False), contenders(True)
    counts = {name: count(name, fn) for name, fn in even.items()}
    uneven_counts = {name: count(name, fn) for name, fn in uneven.items()}
    # Time the contenders in turns, so that a noisy neighbour slows all alike.
    times: dict[str, list[float]] = {name: [] for name in even}
    for _ in range(3):
        for fn in even.values():
            fn()
    for _ in range(25):
        for name, fn in even.items():
            gc.collect()
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(t) for name, t in times.items()}
    best = {name: min(t) for name, t in times.items()}
    strawberry_time = medians["strawberry DataLoader"]
    rows = []
    for name, seconds in medians.items():
        calls, rounds = counts[name]
        u_calls, u_rounds = uneven_counts[name]
        rows.append(
            [
                name,
                fmt_ms(seconds),
                fmt_ms(best[name]),
                ratio(strawberry_time, seconds),
                calls,
                rounds,
                u_calls,
                u_rounds,
            ]
        )
    print(
        table(
            f"GraphQL feed: {N_POSTS} posts x {N_COMMENTS} comments "
            f"(graphql-core {gql.__version__}), time per query, 25 runs in turns",
            [
                "contender",
                "median",
                "best",
                "median speed vs strawberry",
                "calls",
                "rounds",
                "uneven: calls",
                "uneven: rounds",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
