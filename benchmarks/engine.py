"""The engine suite: batchy against asynq, aiodataloader and strawberry's DataLoader, side by side.

Seven workloads, each written idiomatically for every system:

- flat, tree, rewalk, parallel and blog, from issue 2;
- pair: 10,000 handlers each loading one key of two plain-function loaders at once
  (``x, y = yield a(k), b(k)``), with batchy also running the same handlers one
  load after the other (``batchy sequential``) to price the tuple yield;
- blog x10: the blog page with ten times the posts, comments and users.

The systems:

- batchy: ``@batchy.task`` generator handlers yielding ``@batchy.batched`` loaders,
  run with ``batchy.run``;
- asynq: ``@asynq()`` generator handlers yielding batch items of a small
  ``BatchBase`` / ``BatchItemBase`` loader (:class:`AsynqLoader`), run synchronously;
- aiodataloader and strawberry: ``async def`` handlers that ``await loader.load(key)``
  and ``asyncio.gather`` their children, run with ``asyncio.run``. Both peers share
  the handler code; only the ``DataLoader`` class differs.

Every batch function counts its calls and *rounds* (sequential waves of batch
calls) in a :class:`Counter`: a call that starts while another batch call is in
flight joins that wave; a call that starts when none is in flight opens a new one.
asynq flushes synchronously, so there every flush is its own round. For batchy the
rounds the scheduler reports through ``batchy.testing.record()`` are shown too.

Each system's result is compared with batchy's, so a benchmark that computes the
wrong thing fails loudly instead of looking fast.

The module is longer than our usual 400 lines because it holds every workload
written four ways; they stay side by side so the versions can be read together.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from asynq import BatchBase, BatchItemBase, asynq
from asynq import debug as asynq_debug

import batchy
from batchy.testing import record

from ._util import fmt_ms, median_time, median_times, ratio, table

__all__ = ["main"]

PEERS = ("asynq", "aiodataloader", "strawberry")
SYSTEMS = ("batchy", *PEERS)

FLAT = 10_000  # handlers under one root
FANOUT = 100  # tree: 1 -> 100 -> 100
WAITERS = 10_000  # rewalk: handlers blocked on one chain ...
CHAIN = 100  # ... of this many dependent single-key rounds
SLOW = 0.010  # parallel: seconds per batch call
PAIRS = 10_000  # pair: handlers, each loading one key of two loaders at once
POSTS = 50  # blog: posts ...
COMMENTS = 20  # ... times comments per post
USERS = 97  # distinct comment authors (under USERS_BATCH: one users call)
USERS_BATCH = 500  # blog: max_batch_size of users_by_id
BLOG_DELAY = 0.002  # blog: seconds per batch call
SCALE = 10  # blog x10: times the posts and users (970 users: two users calls)


# -- counting batch calls and rounds --------------------------------------------------


@dataclass
class Counter:
    """Batch calls and rounds (waves of overlapping batch calls) of one run."""

    calls: int = 0
    rounds: int = 0
    inflight: int = 0

    def start(self) -> None:
        self.calls += 1
        if self.inflight == 0:
            self.rounds += 1
        self.inflight += 1

    def end(self) -> None:
        self.inflight -= 1


AsyncBatchFn = Callable[[list[Any]], Coroutine[Any, Any, list[Any]]]
SyncBatchFn = Callable[[list[Any]], list[Any]]


def async_batch(
    counter: Counter, lookup: Callable[[Any], Any] = lambda k: k * 2, delay: float = 0.0
) -> AsyncBatchFn:
    """A counted ``async def`` batch function: used by batchy and both DataLoader peers."""

    async def load(keys: list[Any]) -> list[Any]:
        counter.start()
        try:
            if delay:
                await asyncio.sleep(delay)
            return [lookup(k) for k in keys]
        finally:
            counter.end()

    return load


def sync_batch(
    counter: Counter, lookup: Callable[[Any], Any] = lambda k: k * 2, delay: float = 0.0
) -> SyncBatchFn:
    """The same, synchronous: asynq flushes a batch by a plain call (``time.sleep`` for I/O)."""

    def load(keys: list[Any]) -> list[Any]:
        counter.start()
        try:
            if delay:
                time.sleep(delay)
            return [lookup(k) for k in keys]
        finally:
            counter.end()

    return load


# -- an asynq loader -------------------------------------------------------------------


class _AsynqBatch(BatchBase):  # type: ignore[type-arg]
    """One asynq batch: the items a loader collected until the scheduler flushes it."""

    def __init__(self, loader: AsynqLoader) -> None:
        super().__init__()
        self.loader = loader

    def _try_switch_active_batch(self) -> None:
        # Called by asynq before the flush: later loads go to a fresh batch.
        if self.loader.batch is self:
            self.loader.batch = _AsynqBatch(self.loader)

    def _flush(self) -> None:
        items = self.items
        values = self.loader.fn([item.key for item in items])
        for item, value in zip(items, values, strict=True):
            item.set_value(value)


class _AsynqItem(BatchItemBase):
    def __init__(self, batch: _AsynqBatch, key: Any) -> None:
        super().__init__(batch)
        self.key = key


class AsynqLoader:
    """``load(key)`` gives a batch item; one item per key per run, like the DataLoaders' cache.

    With ``max_batch_size``, a full batch is left to be flushed and later keys go
    to a fresh one, so every system makes the same batch calls.
    """

    def __init__(self, fn: SyncBatchFn, max_batch_size: int | None = None) -> None:
        self.fn = fn
        self.max_batch_size = max_batch_size
        self.batch = _AsynqBatch(self)
        self.cache: dict[Any, _AsynqItem] = {}

    def load(self, key: Any) -> _AsynqItem:
        item = self.cache.get(key)
        if item is None:
            if self.max_batch_size is not None and len(self.batch.items) >= self.max_batch_size:
                self.batch = _AsynqBatch(self)
            item = self.cache[key] = _AsynqItem(self.batch, key)
        return item


# -- the DataLoader peers --------------------------------------------------------------


DataLoaderFactory = Callable[..., Any]


def dataloaders() -> tuple[dict[str, DataLoaderFactory], dict[str, str]]:
    """The DataLoader classes that import, and why the others do not.

    Importing ``strawberry.dataloader`` imports all of strawberry, which breaks
    whenever graphql-core is at a version it does not support (graphene pins
    another one); the suite then reports that peer as missing instead of dying.
    """
    found: dict[str, DataLoaderFactory] = {}
    missing: dict[str, str] = {}
    try:
        import aiodataloader

        def make_aiodataloader(fn: AsyncBatchFn, max_batch_size: int | None = None) -> Any:
            return aiodataloader.DataLoader(batch_load_fn=fn, max_batch_size=max_batch_size)

        found["aiodataloader"] = make_aiodataloader
    except ImportError as error:
        missing["aiodataloader"] = f"{type(error).__name__}: {error}"
    try:
        import strawberry.dataloader

        def make_strawberry(fn: AsyncBatchFn, max_batch_size: int | None = None) -> Any:
            return strawberry.dataloader.DataLoader(load_fn=fn, max_batch_size=max_batch_size)

        found["strawberry"] = make_strawberry
    except ImportError as error:
        missing["strawberry"] = f"{type(error).__name__}: {error}"
    return found, missing


# -- flat: one root waits on 10,000 handlers, each loading one key ---------------------


@batchy.task
def b_flat_handler(load: batchy.Loader[int, int], i: int) -> Generator[Any, Any, int]:
    value: int = yield load(i)
    return value


@batchy.task
def b_flat_root(load: batchy.Loader[int, int]) -> Generator[Any, Any, int]:
    values = yield [b_flat_handler(load, i) for i in range(FLAT)]
    return sum(values)


def flat_batchy(counter: Counter) -> int:
    return batchy.run(b_flat_root(batchy.batched(async_batch(counter))))


@asynq()
def a_flat_handler(load: AsynqLoader, i: int) -> Generator[Any, Any, int]:
    value: int = yield load.load(i)
    return value


@asynq()
def a_flat_root(load: AsynqLoader) -> Generator[Any, Any, int]:
    values = yield [a_flat_handler.asynq(load, i) for i in range(FLAT)]
    return sum(values)


def flat_asynq(counter: Counter) -> int:
    return a_flat_root(AsynqLoader(sync_batch(counter)))  # type: ignore[no-any-return]


async def d_flat_handler(load: Any, i: int) -> int:
    return await load.load(i)  # type: ignore[no-any-return]


async def d_flat_root(make: DataLoaderFactory, counter: Counter) -> int:
    load = make(async_batch(counter))
    values = await asyncio.gather(*(d_flat_handler(load, i) for i in range(FLAT)))
    return sum(values)


# -- tree: 1 -> 100 -> 100 handlers, each loading its key, then gathering its children --


def children(node: int, depth: int) -> range:
    """Node ids: the root is 0, its children 1..100, their children 101..10,100."""
    if depth == 0:
        return range(1, FANOUT + 1)
    if depth == 1:
        first = FANOUT + 1 + (node - 1) * FANOUT
        return range(first, first + FANOUT)
    return range(0)


@batchy.task
def b_tree(load: batchy.Loader[int, int], node: int, depth: int) -> Generator[Any, Any, int]:
    value: int = yield load(node)
    below: list[int] = yield [b_tree(load, c, depth + 1) for c in children(node, depth)]
    return value + sum(below)


def tree_batchy(counter: Counter) -> int:
    return batchy.run(b_tree(batchy.batched(async_batch(counter)), 0, 0))


@asynq()
def a_tree(load: AsynqLoader, node: int, depth: int) -> Generator[Any, Any, int]:
    value = yield load.load(node)
    below = yield [a_tree.asynq(load, c, depth + 1) for c in children(node, depth)]
    return value + sum(below)  # type: ignore[no-any-return]


def tree_asynq(counter: Counter) -> int:
    return a_tree(AsynqLoader(sync_batch(counter)), 0, 0)  # type: ignore[no-any-return]


async def d_tree(load: Any, node: int, depth: int) -> int:
    value = await load.load(node)
    below = await asyncio.gather(*(d_tree(load, c, depth + 1) for c in children(node, depth)))
    return value + sum(below)  # type: ignore[no-any-return]


async def d_tree_root(make: DataLoaderFactory, counter: Counter) -> int:
    return await d_tree(make(async_batch(counter)), 0, 0)


# -- rewalk: 10,000 handlers wait on one task that walks 100 dependent loads ------------


@batchy.task
def b_chain(load: batchy.Loader[int, int]) -> Generator[Any, Any, int]:
    total = 0
    for i in range(CHAIN):
        total += yield load(i)
    return total


@batchy.task
def b_waiter(chain: batchy.Task[int]) -> Generator[Any, Any, int]:
    value: int = yield chain
    return value


@batchy.task
def b_rewalk_root(load: batchy.Loader[int, int]) -> Generator[Any, Any, int]:
    chain = b_chain(load)
    values = yield [b_waiter(chain) for _ in range(WAITERS)]
    return sum(values)


def rewalk_batchy(counter: Counter) -> int:
    return batchy.run(b_rewalk_root(batchy.batched(async_batch(counter))))


@asynq()
def a_chain(load: AsynqLoader) -> Generator[Any, Any, int]:
    total = 0
    for i in range(CHAIN):
        total += yield load.load(i)
    return total


@asynq()
def a_waiter(chain: Any) -> Generator[Any, Any, int]:
    value: int = yield chain
    return value


@asynq()
def a_rewalk_root(load: AsynqLoader) -> Generator[Any, Any, int]:
    chain = a_chain.asynq(load)
    values = yield [a_waiter.asynq(chain) for _ in range(WAITERS)]
    return sum(values)


def rewalk_asynq(counter: Counter) -> int:
    return a_rewalk_root(AsynqLoader(sync_batch(counter)))  # type: ignore[no-any-return]


async def d_chain(load: Any) -> int:
    total = 0
    for i in range(CHAIN):
        total += await load.load(i)
    return total


async def d_waiter(chain: asyncio.Task[int]) -> int:
    return await chain


async def d_rewalk_root(make: DataLoaderFactory, counter: Counter) -> int:
    chain = asyncio.ensure_future(d_chain(make(async_batch(counter))))
    values = await asyncio.gather(*(d_waiter(chain) for _ in range(WAITERS)))
    return sum(values)


# -- parallel: two independent loaders, each batch call taking 10 ms -------------------


@batchy.task
def b_parallel(a: batchy.Loader[int, int], b: batchy.Loader[int, int]) -> Generator[Any, Any, int]:
    x, y = yield a(1), b(2)
    return x + y  # type: ignore[no-any-return]


def parallel_batchy(counter: Counter) -> int:
    a = batchy.batched(async_batch(counter, delay=SLOW))
    b = batchy.batched(async_batch(counter, delay=SLOW))
    return batchy.run(b_parallel(a, b))


@asynq()
def a_parallel(a: AsynqLoader, b: AsynqLoader) -> Generator[Any, Any, int]:
    x, y = yield a.load(1), b.load(2)
    return x + y  # type: ignore[no-any-return]


def parallel_asynq(counter: Counter) -> int:
    # asynq flushes by a synchronous call: a 10 ms query blocks (time.sleep).
    a = AsynqLoader(sync_batch(counter, delay=SLOW))
    b = AsynqLoader(sync_batch(counter, delay=SLOW))
    return a_parallel(a, b)  # type: ignore[no-any-return]


async def d_parallel(make: DataLoaderFactory, counter: Counter) -> int:
    a = make(async_batch(counter, delay=SLOW))
    b = make(async_batch(counter, delay=SLOW))
    x, y = await asyncio.gather(a.load(1), b.load(2))
    return x + y  # type: ignore[no-any-return]


async def _one_slow_call() -> None:
    await asyncio.sleep(SLOW)


# -- pair: 10,000 handlers, each loading its key of two loaders at once -----------------

#: The two loaders' lookups; each handler returns ``x - y``, so a swapped or misplaced
#: value changes the result.
PAIR_LOOKUPS: tuple[Callable[[int], int], Callable[[int], int]] = (
    lambda k: k * 2,
    lambda k: k * 3,
)


@batchy.task
def b_pair(
    a: batchy.Loader[int, int], b: batchy.Loader[int, int], k: int
) -> Generator[Any, Any, int]:
    x, y = yield a(k), b(k)
    return x - y  # type: ignore[no-any-return]


@batchy.task
def b_pair_sequential(
    a: batchy.Loader[int, int], b: batchy.Loader[int, int], k: int
) -> Generator[Any, Any, int]:
    x = yield a(k)
    y = yield b(k)
    return x - y  # type: ignore[no-any-return]


PairHandler = Callable[[batchy.Loader[int, int], batchy.Loader[int, int], int], batchy.Task[int]]


@batchy.task
def b_pair_root(
    handler: PairHandler, a: batchy.Loader[int, int], b: batchy.Loader[int, int]
) -> Generator[Any, Any, list[int]]:
    values: list[int] = yield [handler(a, b, k) for k in range(PAIRS)]
    return values


def pair_batchy(handler: PairHandler) -> Runner:
    """batchy on pair with ``handler``: both loaders are plain (``def``) batch functions."""

    def run(counter: Counter) -> list[int]:
        a, b = (batchy.batched(sync_batch(counter, lookup)) for lookup in PAIR_LOOKUPS)
        return batchy.run(b_pair_root(handler, a, b))

    return run


@asynq()
def a_pair(a: AsynqLoader, b: AsynqLoader, k: int) -> Generator[Any, Any, int]:
    x, y = yield a.load(k), b.load(k)
    return x - y  # type: ignore[no-any-return]


@asynq()
def a_pair_root(a: AsynqLoader, b: AsynqLoader) -> Generator[Any, Any, list[int]]:
    values: list[int] = yield [a_pair.asynq(a, b, k) for k in range(PAIRS)]
    return values


def pair_asynq(counter: Counter) -> list[int]:
    a, b = (AsynqLoader(sync_batch(counter, lookup)) for lookup in PAIR_LOOKUPS)
    return a_pair_root(a, b)  # type: ignore[no-any-return]


async def d_pair(a: Any, b: Any, k: int) -> int:
    x, y = await asyncio.gather(a.load(k), b.load(k))
    return x - y  # type: ignore[no-any-return]


async def d_pair_root(make: DataLoaderFactory, counter: Counter) -> list[int]:
    a, b = (make(async_batch(counter, lookup)) for lookup in PAIR_LOOKUPS)
    return list(await asyncio.gather(*(d_pair(a, b, k) for k in range(PAIRS))))


# -- blog: 50 posts x 20 comments, each comment's author (and blog x10) -----------------


@dataclass(frozen=True)
class BlogShape:
    """How big a blog page is; its methods are the rows the batch functions look up."""

    posts: int
    comments: int  # per post
    users: int  # distinct comment authors

    def post_row(self, pid: int) -> dict[str, Any]:
        return {"id": pid, "title": f"post {pid}"}

    def comment_ids_row(self, pid: int) -> list[int]:
        first = (pid - 1) * self.comments + 1
        return list(range(first, first + self.comments))

    def comment_row(self, cid: int) -> dict[str, Any]:
        return {"id": cid, "user_id": cid % self.users + 1, "text": f"comment {cid}"}

    def user_row(self, uid: int) -> dict[str, Any]:
        return {"id": uid, "name": f"user {uid}"}

    def tables(self) -> tuple[Callable[[int], Any], ...]:
        """The lookups of posts_by_id, comment_ids_by_post, comments_by_id, users_by_id."""
        return (self.post_row, self.comment_ids_row, self.comment_row, self.user_row)

    def post_ids(self) -> range:
        return range(1, self.posts + 1)

    def expected_calls(self) -> int:
        """posts, comment ids and comments in one call each; users in chunks of USERS_BATCH."""
        authors = min(self.users, self.posts * self.comments)
        return 3 + -(-authors // USERS_BATCH)

    def what(self) -> str:
        return (
            f"{self.posts} posts x {self.comments} comments and their authors, each call taking "
            f"{BLOG_DELAY * 1000:.0f} ms (asynq: time.sleep)"
        )


BLOGS = {
    "blog": BlogShape(POSTS, COMMENTS, USERS),
    f"blog x{SCALE}": BlogShape(POSTS * SCALE, COMMENTS, USERS * SCALE),
}


@dataclass
class BatchyBlog:
    posts_by_id: batchy.Loader[int, dict[str, Any]]
    comment_ids_by_post: batchy.Loader[int, list[int]]
    comments_by_id: batchy.Loader[int, dict[str, Any]]
    users_by_id: batchy.Loader[int, dict[str, Any]]


@batchy.task
def b_comment_view(db: BatchyBlog, cid: int) -> Generator[Any, Any, dict[str, Any]]:
    comment = yield db.comments_by_id(cid)
    author = yield db.users_by_id(comment["user_id"])
    return {**comment, "author": author}


@batchy.task
def b_post_view(db: BatchyBlog, pid: int) -> Generator[Any, Any, dict[str, Any]]:
    post, cids = yield db.posts_by_id(pid), db.comment_ids_by_post(pid)
    comments = yield [b_comment_view(db, c) for c in cids]
    return {**post, "comments": comments}


def blog_batchy(shape: BlogShape, counter: Counter) -> list[dict[str, Any]]:
    posts, cids, comments, users = (async_batch(counter, row, BLOG_DELAY) for row in shape.tables())
    db = BatchyBlog(
        batchy.batched(name="posts_by_id")(posts),
        batchy.batched(name="comment_ids_by_post")(cids),
        batchy.batched(name="comments_by_id")(comments),
        batchy.batched(name="users_by_id", max_batch_size=USERS_BATCH)(users),
    )
    return batchy.run(batchy.gather(*(b_post_view(db, p) for p in shape.post_ids())))


@dataclass
class AsynqBlog:
    posts: AsynqLoader
    comment_ids: AsynqLoader
    comments: AsynqLoader
    users: AsynqLoader


@asynq()
def a_comment_view(db: AsynqBlog, cid: int) -> Generator[Any, Any, dict[str, Any]]:
    comment = yield db.comments.load(cid)
    author = yield db.users.load(comment["user_id"])
    return {**comment, "author": author}


@asynq()
def a_post_view(db: AsynqBlog, pid: int) -> Generator[Any, Any, dict[str, Any]]:
    post, cids = yield db.posts.load(pid), db.comment_ids.load(pid)
    comments = yield [a_comment_view.asynq(db, c) for c in cids]
    return {**post, "comments": comments}


@asynq()
def a_page(db: AsynqBlog, post_ids: range) -> Generator[Any, Any, list[dict[str, Any]]]:
    page: list[dict[str, Any]] = yield [a_post_view.asynq(db, p) for p in post_ids]
    return page


def blog_asynq(shape: BlogShape, counter: Counter) -> list[dict[str, Any]]:
    posts, cids, comments, users = (sync_batch(counter, row, BLOG_DELAY) for row in shape.tables())
    db = AsynqBlog(
        AsynqLoader(posts),
        AsynqLoader(cids),
        AsynqLoader(comments),
        AsynqLoader(users, max_batch_size=USERS_BATCH),
    )
    return a_page(db, shape.post_ids())  # type: ignore[no-any-return]


@dataclass
class DataLoaderBlog:
    posts: Any
    comment_ids: Any
    comments: Any
    users: Any


async def d_comment_view(db: DataLoaderBlog, cid: int) -> dict[str, Any]:
    comment = await db.comments.load(cid)
    author = await db.users.load(comment["user_id"])
    return {**comment, "author": author}


async def d_post_view(db: DataLoaderBlog, pid: int) -> dict[str, Any]:
    post, cids = await asyncio.gather(db.posts.load(pid), db.comment_ids.load(pid))
    comments = await asyncio.gather(*(d_comment_view(db, c) for c in cids))
    return {**post, "comments": list(comments)}


async def d_blog(
    shape: BlogShape, make: DataLoaderFactory, counter: Counter
) -> list[dict[str, Any]]:
    posts, cids, comments, users = (async_batch(counter, row, BLOG_DELAY) for row in shape.tables())
    db = DataLoaderBlog(
        make(posts), make(cids), make(comments), make(users, max_batch_size=USERS_BATCH)
    )
    return list(await asyncio.gather(*(d_post_view(db, p) for p in shape.post_ids())))


# -- running and reporting -------------------------------------------------------------


Runner = Callable[[Counter], Any]
DataLoaderRoot = Callable[[DataLoaderFactory, Counter], Awaitable[Any]]


def dataloader_runner(root: DataLoaderRoot, make: DataLoaderFactory) -> Runner:
    # The loader is made inside the running loop: aiodataloader binds the loop it is made on.
    return lambda counter: asyncio.run(root(make, counter))  # type: ignore[arg-type]


@dataclass
class Workload:
    name: str
    what: str
    runners: dict[str, Runner]
    repeat: int = 21
    #: Fewer repeats for a system that takes a second per run (asynq on rewalk).
    repeat_for: dict[str, int] = field(default_factory=dict)


@dataclass
class Measured:
    seconds: float
    calls: int
    rounds: int
    same_result: bool


def workloads(loaders: dict[str, DataLoaderFactory]) -> list[Workload]:
    def systems(
        batchy_run: Runner,
        asynq_run: Runner,
        root: DataLoaderRoot,
        also: dict[str, Runner] | None = None,
    ) -> dict[str, Runner]:
        """batchy, then ``also`` (batchy variants measured alongside), then the peers."""
        runners = {"batchy": batchy_run, **(also or {}), "asynq": asynq_run}
        for name, make in loaders.items():
            runners[name] = dataloader_runner(root, make)
        return runners

    def blog(name: str, repeat: int) -> Workload:
        shape = BLOGS[name]
        return Workload(
            name,
            shape.what(),
            systems(
                partial(blog_batchy, shape),
                partial(blog_asynq, shape),
                partial(d_blog, shape),
            ),
            repeat,
        )

    return [
        Workload(
            "flat",
            f"one root waits on {FLAT:,} handlers, each loading one key",
            systems(flat_batchy, flat_asynq, d_flat_root),
        ),
        Workload(
            "tree",
            f"1 -> {FANOUT} -> {FANOUT} handlers ({1 + FANOUT + FANOUT**2:,}), "
            "each loading one key, then gathering its children",
            systems(tree_batchy, tree_asynq, d_tree_root),
        ),
        Workload(
            "rewalk",
            f"{WAITERS:,} handlers wait on one task that makes {CHAIN} dependent single-key loads",
            systems(rewalk_batchy, rewalk_asynq, d_rewalk_root),
            repeat_for={"asynq": 7},
        ),
        Workload(
            "parallel",
            f"two independent loaders, each call taking {SLOW * 1000:.0f} ms "
            "(asynq: time.sleep, as its flush is a plain call)",
            systems(parallel_batchy, parallel_asynq, d_parallel),
            repeat=31,
        ),
        Workload(
            "pair",
            f"{PAIRS:,} handlers, each loading its key of two plain-function loaders at once "
            "(batchy sequential: one load after the other)",
            systems(
                pair_batchy(b_pair),
                pair_asynq,
                d_pair_root,
                also={"batchy sequential": pair_batchy(b_pair_sequential)},
            ),
        ),
        blog("blog", repeat=31),
        # Its runs take 40 to 250 ms: 21 of them settle the medians as well as 31.
        blog(f"blog x{SCALE}", repeat=21),
    ]


def measure(work: Workload) -> dict[str, Measured]:
    # One untimed run per system gives its result, calls and rounds, and warms it up.
    results: dict[str, Any] = {}
    counts: dict[str, Counter] = {}
    for system, run in work.runners.items():
        counts[system] = Counter()
        results[system] = run(counts[system])
    timed = {system: (lambda run=run: run(Counter())) for system, run in work.runners.items()}
    seconds = median_times(timed, repeat=work.repeat, warmup=0, repeat_for=work.repeat_for)
    return {
        system: Measured(
            seconds[system],
            counts[system].calls,
            counts[system].rounds,
            results[system] == results["batchy"],
        )
        for system in work.runners
    }


def recorded_batchy(work: Workload) -> tuple[int, int]:
    """Calls and rounds of batchy's run as ``batchy.testing.record()`` reports them."""
    with record() as rec:
        work.runners["batchy"](Counter())
    return len(rec.batches), rec.rounds


@dataclass
class Verdict:
    workload: str
    target: str
    got: str
    ok: bool | None  # None: could not be judged (a peer is missing)
    #: The system whose row of the workload's table shows this target, if any.
    system: str | None = None

    def line(self) -> str:
        return f"{self.target}: {self.got} -> {verdict_word(self.ok)}"


def faster_than(
    work: Workload, m: dict[str, Measured], peer: str, times: float, *, in_table: bool = False
) -> Verdict:
    """batchy at least ``times`` faster than ``peer``; ``in_table``: shown in the peer's row."""
    speedup = m[peer].seconds / m["batchy"].seconds
    target = f"{times:g}x faster than {peer}"
    system = peer if in_table else None
    return Verdict(work.name, target, f"{speedup:.1f}x", speedup >= times, system)


def judge(work: Workload, m: dict[str, Measured], rec: tuple[int, int]) -> list[Verdict]:
    ours = m["batchy"].seconds
    if work.name in ("flat", "tree"):
        target = "3x faster than the fastest peer"
        fastest = min((p for p in PEERS if p in m), key=lambda p: m[p].seconds)
        speedup = m[fastest].seconds / ours
        return [Verdict(work.name, target, f"{speedup:.1f}x vs {fastest}", speedup >= 3)]
    if work.name == "rewalk":
        return [faster_than(work, m, "asynq", 50)]
    if work.name == "parallel":
        target = f"within 1.3x of one {SLOW * 1000:.0f} ms call"
        return [Verdict(work.name, target, f"{ours / SLOW:.2f}x", ours <= 1.3 * SLOW)]
    if work.name == "pair":
        over = ours / m["batchy sequential"].seconds
        target = "batchy / batchy sequential at most 1.1x"
        return [
            Verdict(work.name, target, f"{over:.2f}x", over <= 1.1, system="batchy"),
            faster_than(work, m, "asynq", 3, in_table=True),
        ]
    calls, rounds = rec
    want = (BLOGS[work.name].expected_calls(), 3)
    target = f"{want[0]} calls, {want[1]} rounds"
    return [Verdict(work.name, target, f"{calls} calls, {rounds} rounds", (calls, rounds) == want)]


def report(
    work: Workload, m: dict[str, Measured], rec: tuple[int, int], verdicts: Sequence[Verdict]
) -> str:
    """The workload's table; a target about one system gets a column, shown in that row."""
    ours = m["batchy"].seconds
    header: tuple[str, ...] = (
        "system",
        "median",
        "peer / batchy",
        "calls",
        "rounds",
        "same result",
    )
    rows: list[Sequence[Any]] = [
        (
            system,
            fmt_ms(r.seconds),
            "1.0x" if system == "batchy" else ratio(r.seconds, ours),
            r.calls,
            r.rounds,
            "yes" if r.same_result else "NO: differs from batchy",
        )
        for system, r in m.items()
    ]
    targets = {v.system: v.line() for v in verdicts if v.system is not None}
    if targets:
        header += ("target",)
        rows = [(*row, targets.get(system, "")) for row, system in zip(rows, m)]
    text = table(f"{work.name}: {work.what}", header, rows)
    calls, rounds = rec
    if (calls, rounds) != (m["batchy"].calls, m["batchy"].rounds):
        text += (
            f"\nnote: batchy.testing.record() saw {calls} calls in {rounds} scheduler rounds; "
            "the table counts waves of overlapping calls"
        )
    return text


def verdict_word(ok: bool | None) -> str:
    return "n/a" if ok is None else "PASS" if ok else "FAIL"


def main() -> None:
    started = time.perf_counter()
    loaders, missing = dataloaders()
    for name, why in missing.items():
        print(f"WARNING: peer {name} is not measured: {why}")
    verdicts = []
    # asynq checks extra invariants unless told not to; switching them off is what
    # production code does, and makes it faster (the harder target for us).
    with asynq_debug.disable_complex_assertions():
        for work in workloads(loaders):
            m = measure(work)
            rec = recorded_batchy(work)
            judged = judge(work, m, rec)
            for verdict in judged:
                if missing and work.name in ("flat", "tree"):
                    verdict.ok = None
                    verdict.got += f" (without {', '.join(missing)})"
            print(report(work, m, rec, judged))
            for verdict in judged:
                print(f"target: {verdict.line()}")
            verdicts += judged
            if not all(r.same_result for r in m.values()):
                print("WARNING: a system computed a different result; its time means nothing")
            print(flush=True)
    one_call = median_time(lambda: asyncio.run(_one_slow_call()), repeat=21)
    print(f"reference: one {SLOW * 1000:.0f} ms call under asyncio.run: {fmt_ms(one_call)}\n")
    print(
        table(
            "engine targets",
            ("workload", "target", "batchy", "verdict"),
            [(v.workload, v.target, v.got, verdict_word(v.ok)) for v in verdicts],
        )
    )
    print(f"(engine suite: {time.perf_counter() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
