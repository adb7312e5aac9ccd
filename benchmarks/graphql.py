"""GraphQL: the feed at two sizes, a list of scalars, and the feed over HTTP, vs DataLoaders.

Every in-process contender runs the same graphql-core schema and query; only the
resolvers' loading differs:

- **batchy async**: resolvers return batchy loader futures; ``await
  batchy_contrib.graphql.graphql(...)``.
- **batchy sync**: the same resolvers through ``graphql_sync`` (no loop in the caller).
- **batchy.DataLoader**: the DataLoader-compatible class, per-request instances.
- **strawberry DataLoader** / **aiodataloader**: per-request DataLoader instances,
  resolvers return ``loader.load(key)``; plain ``graphql.graphql(...)`` (graphql-core async).
- **graphql-core sync / async, no loaders** (a reference, not a peer): the same
  schema with every resolver answering from memory at once, on graphql-core's
  own ``graphql_sync`` (``execute_sync``) or ``graphql``: the floor of executing
  the query on graphql-core.

The tables:

1. the feed of the GraphQL issues, 50 posts x 20 comments and every author;
2. the same feed with 2,000 posts x 3 comments (the acceptance feed's shape);
3. a list of 5,000 items with 10 scalar fields, loaded in one call;
4. the 50 x 20 feed served over HTTP by uvicorn with strawberry, on batchy and on
   strawberry's DataLoader: requests/s at 8 concurrent clients
   (``benchmarks/_graphql_http.py``).

Batch functions answer at once (no I/O), so the time is the cost of execution and
batching. Rounds for the DataLoaders are the loop iterations in which batch calls
ran. ``BATCHY_BENCH_SCALE`` (default 1) scales the number of runs and the HTTP
durations: ``BATCHY_BENCH_SCALE=0.2`` for a quick look.
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import aiodataloader
import graphql as gql
import strawberry.dataloader

from batchy.dataloader import DataLoader as BatchyDataLoader
from batchy.testing import record
from batchy_contrib import graphql as bgql

from . import _graphql_http as over_http
from ._graphql_data import Counter, Feed, ItemList
from ._util import fmt_ms, ratio, table

SCALE = float(os.environ.get("BATCHY_BENCH_SCALE", "1"))  # 0.2 for a quick look

SMALL_FEED = Feed(posts=50, comments=20, users=100)
BIG_FEED = Feed(posts=2000, comments=3, users=1000)
ITEMS = ItemList(5000)
HTTP_CLIENTS = 8


def runs(n: int) -> int:
    return max(3, round(n * SCALE))


def check(result: gql.ExecutionResult) -> gql.ExecutionResult:
    if result.errors:
        raise RuntimeError(f"benchmark query failed: {result.errors[0]}")
    return result


def on_loop(make: Callable[[], Any], counter: Callable[[], Counter] | None = None) -> Any:
    """A contender that runs ``await make()`` in a new event loop, as a request would."""

    def run(tick: bool = False) -> None:
        # The ticker counts loop iterations for the DataLoaders' rounds; it
        # keeps the loop busy, so it runs only in the counting run.
        async def main() -> None:
            aw = make()
            check(await (counter().run(aw) if tick and counter else aw))
            # Return nothing: on exit asyncio.run formats the repr of the
            # main task, result included, which for a response costs ~1 ms.

        asyncio.run(main())

    return run


def feed_contenders(feed: Feed, uneven: bool) -> dict[str, Callable[..., Any]]:
    ours = feed.schema(lambda info, name: feed.batched[name], uneven)
    theirs = feed.schema(lambda info, name: info.context[name].load, uneven)
    plain = feed.schema(lambda info, name: feed.in_memory[name])
    query = feed.query

    def their(cls: Any) -> Callable[..., Any]:
        make = lambda: gql.graphql(theirs, query, context_value=feed.loaders(cls))  # noqa: E731
        return on_loop(make, lambda: feed.counter)

    return {
        "batchy async": on_loop(lambda: bgql.graphql(ours, query)),
        "batchy sync": lambda tick=False: check(bgql.graphql_sync(ours, query)),
        "batchy.DataLoader": on_loop(
            lambda: bgql.graphql(theirs, query, context_value=feed.loaders(BatchyDataLoader))
        ),
        "strawberry DataLoader": their(strawberry.dataloader.DataLoader),
        "aiodataloader": their(aiodataloader.DataLoader),
        "graphql-core sync, no loaders": lambda tick=False: check(gql.graphql_sync(plain, query)),
    }


def count(feed: Feed, name: str, fn: Callable[..., Any]) -> tuple[int, int]:
    """Batch calls and rounds of one query."""
    feed.counter = Counter()
    ours = name.startswith("batchy")
    with record() as rec:
        fn(tick=not ours)
    if name.startswith("graphql-core"):
        return 0, 0  # no loaders
    return feed.counter.calls, rec.rounds if ours else len(feed.counter.ticks)


def timed(fns: dict[str, Callable[..., Any]], repeat: int) -> dict[str, list[float]]:
    """Every contender's times, the contenders taking turns so a noisy neighbour slows all."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            gc.collect()
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def feed_table(feed: Feed, repeat: int) -> tuple[str, dict[str, float]]:
    even, uneven = feed_contenders(feed, False), feed_contenders(feed, True)
    counts = {name: count(feed, name, fn) for name, fn in even.items()}
    uneven_counts = {name: count(feed, name, fn) for name, fn in uneven.items()}
    times = timed(even, repeat)
    medians = {name: statistics.median(t) for name, t in times.items()}
    strawberry_time = medians["strawberry DataLoader"]
    rows = [
        [
            name,
            fmt_ms(seconds),
            fmt_ms(min(times[name])),
            ratio(strawberry_time, seconds),
            *counts[name],
            *uneven_counts[name],
        ]
        for name, seconds in medians.items()
    ]
    title = (
        f"GraphQL feed: {feed} (graphql-core {gql.__version__}), "
        f"time per query, {repeat} runs in turns"
    )
    header = ["contender", "median", "best", "median speed vs strawberry", "calls", "rounds"]
    return table(title, [*header, "uneven: calls", "uneven: rounds"], rows), medians


def list_contenders(items: ItemList) -> dict[str, Callable[..., Any]]:
    ours = items.schema(lambda root, info, first: items.batched(first))
    theirs = items.schema(lambda root, info, first: info.context.load(first))
    plain = items.schema(lambda root, info, first: items.rows[:first])
    query = items.query

    def dataloader() -> Any:
        loader = strawberry.dataloader.DataLoader(items.batch_function)
        return gql.graphql(theirs, query, context_value=loader)

    return {
        "batchy sync": lambda: check(bgql.graphql_sync(ours, query)),
        "batchy async": on_loop(lambda: bgql.graphql(ours, query)),
        "strawberry DataLoader": on_loop(dataloader),
        "graphql-core sync, no loaders": lambda: check(gql.graphql_sync(plain, query)),
        "graphql-core async, no loaders": on_loop(lambda: gql.graphql(plain, query)),
    }


def list_table(items: ItemList, repeat: int) -> tuple[str, dict[str, float]]:
    fns = list_contenders(items)
    plain = items.schema(lambda root, info, first: items.rows[:first])
    ours = items.schema(lambda root, info, first: items.batched(first))
    if bgql.graphql_sync(ours, items.query).data != gql.graphql_sync(plain, items.query).data:
        raise RuntimeError("batchy and graphql-core answered the list differently")
    times = timed(fns, repeat)
    medians = {name: statistics.median(t) for name, t in times.items()}
    core = medians["graphql-core sync, no loaders"]
    rows = [
        [name, fmt_ms(s), fmt_ms(min(times[name])), ratio(core, s)] for name, s in medians.items()
    ]
    title = (
        f"GraphQL list: {items} (graphql-core {gql.__version__}), "
        f"time per query, {repeat} runs in turns"
    )
    header = ["contender", "median", "best", "median speed vs graphql-core sync"]
    return table(title, header, rows), medians


def http_table(feed: Feed, repeat: int, seconds: float) -> tuple[str, dict[str, float]]:
    systems = {"strawberry + batchy": "batchy", "strawberry + DataLoader": "dataloader"}
    args = (feed.posts, feed.comments_per_post, feed.n_users)
    with over_http.server("batchy", *args) as ours, over_http.server("dataloader", *args) as theirs:
        urls = {"strawberry + batchy": ours, "strawberry + DataLoader": theirs}
        answers = {name: over_http.fetch_once(url, feed.query) for name, url in urls.items()}
        if len({repr(a["data"]) for a in answers.values()}) != 1:
            raise RuntimeError("the HTTP servers answered the feed differently")
        stats = answers["strawberry + batchy"]["extensions"]["batchy"]
        for url in urls.values():  # warm up: connections, caches, the allocator
            over_http.requests_per_second(
                url, feed.query, clients=HTTP_CLIENTS, seconds=seconds / 2
            )
        rates: dict[str, list[float]] = {name: [] for name in urls}
        for _ in range(repeat):
            for name, url in urls.items():
                rate = over_http.requests_per_second(
                    url, feed.query, clients=HTTP_CLIENTS, seconds=seconds
                )
                rates[name].append(rate)
    medians = {name: statistics.median(r) for name, r in rates.items()}
    rows = [
        [
            name,
            f"{medians[name]:.1f}",
            f"{min(r):.1f}-{max(r):.1f}",
            f"{medians[name] / medians['strawberry + DataLoader']:.1f}x",
            f"{stats['rounds']} rounds, {sum(stats['calls'].values())} calls"
            if systems[name] == "batchy"
            else "-",
        ]
        for name, r in rates.items()
    ]
    title = (
        f"GraphQL over HTTP: the feed, {feed}, strawberry's ASGI app on uvicorn; "
        f"requests/s at {HTTP_CLIENTS} concurrent clients (httpx, another process), "
        f"{repeat} runs of {seconds:.0f} s in turns"
    )
    header = ["server", "requests/s median", "range", "vs DataLoader", "batchy per request"]
    return table(title, header, rows), medians


def verdict(name: str, measured: float, target: float) -> str:
    return f"target: {name} at least {target:g}x: {measured:.2f}x -> " + (
        "PASS" if measured >= target else "FAIL"
    )


def main() -> None:
    text, small = feed_table(SMALL_FEED, runs(25))
    print(text)
    speed = small["strawberry DataLoader"] / small["batchy async"]
    print(verdict("batchy async vs strawberry's DataLoader (issue 4)", speed, 2), flush=True)

    text, big = feed_table(BIG_FEED, runs(9))
    print(f"\n{text}")
    speed = big["strawberry DataLoader"] / big["batchy async"]
    print(verdict("batchy async vs strawberry's DataLoader", speed, 4), flush=True)

    text, listed = list_table(ITEMS, runs(9))
    print(f"\n{text}")
    core = listed["graphql-core sync, no loaders"]
    slower = max(listed["batchy sync"], listed["batchy async"])
    print(verdict("batchy (the slower of sync and async) vs execute_sync", core / slower, 2))

    text, rates = http_table(SMALL_FEED, runs(5), max(1.0, 4 * SCALE))
    print(f"\n{text}")
    speed = rates["strawberry + batchy"] / rates["strawberry + DataLoader"]
    print(verdict("requests/s, strawberry + batchy vs + DataLoader", speed, 2), flush=True)


if __name__ == "__main__":
    main()
