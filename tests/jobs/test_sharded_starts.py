"""Starts of one sharded run at the same moment, on every store: the run starts once.

A start reads every shard's state and then pushes; two processes starting a
finished run (or a new one) at once both read "all done". Whatever the
interleaving of their reads, their pushes and the workers finishing shards in
between, each shard runs once per start that reported its shards enqueued.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchy.jobs import Backend, Queue

from .conftest import fast_worker

pytestmark = pytest.mark.timeout(120)

SHARDS = 3
#: Starts at once in the interleavings.
STARTS = 2
_names = itertools.count(1)
#: Which start is calling the store (None: a worker, or the test itself).
starter: contextvars.ContextVar[int | None] = contextvars.ContextVar("starter", default=None)


@pytest.mark.parametrize("pause", ["push", "statuses"])
@pytest.mark.parametrize("first", [True, False], ids=["first-start", "restart"])
async def test_two_starts_at_once_run_each_shard_once(
    queue: Queue, monkeypatch: pytest.MonkeyPatch, pause: str, first: bool
) -> None:
    # Both starts read every shard done (or never run) and both pushed: the shards
    # the first start's worker had finished by then were pushed again and ran twice.
    # Here one start stops after its read of the shards' states (pause="statuses")
    # or before its push, while another start runs.
    runs: Counter[int] = Counter()

    @queue.sharded(shards=SHARDS, name="race")
    async def race(shard: int, shards: int, cursor: int | None) -> None:
        runs[shard] += 1

    if not first:
        assert await race.start("r") == SHARDS
        await fast_worker(queue, burst=True).run()
    backend = queue.backend
    paused, go = asyncio.Event(), asyncio.Event()
    original = getattr(backend, pause)

    async def stalled(*args: object, **kwargs: object) -> object:
        monkeypatch.setattr(backend, pause, original)  # only the first call waits
        if pause == "statuses":  # the read is made, then the wait
            answer = await original(*args, **kwargs)
            paused.set()
            await go.wait()
            return answer
        paused.set()
        await go.wait()
        return await original(*args, **kwargs)

    monkeypatch.setattr(backend, pause, stalled)
    late = asyncio.create_task(race.start("r"))
    await paused.wait()
    assert await race.start("r") == SHARDS
    await fast_worker(queue, burst=True).run()
    go.set()
    assert await late == 0  # the other start came first: this one is the same start
    await fast_worker(queue, burst=True).run()
    twice = 1 if first else 2
    assert runs == Counter(dict.fromkeys(range(SHARDS), twice))
    assert await race.start("r") == SHARDS  # a finished run still starts again


async def test_stores_read_one_runs_last_start(backend: Backend) -> None:
    now = time.time()
    assert await backend.run_started("walk", "a") is None  # nothing started: no table yet
    await backend.note_run("walk", "a", now - 20.25, 3600.0)
    await backend.note_run("walk", "b", now - 10, 3600.0)
    await backend.note_run("other", "a", now - 5, 3600.0)
    assert await backend.run_started("walk", "a") == now - 20.25  # exactly: it names keys
    await backend.note_run("walk", "a", now, 3600.0)  # started again: the latest
    assert await backend.run_started("walk", "a") == now
    assert await backend.run_started("walk", "c") is None


class Gates:
    """Stops each start before each call it makes to the store, until let go."""

    def __init__(self) -> None:
        self.held: dict[int, asyncio.Event] = {}
        self.log: list[tuple[int, str]] = []  # (start, "read" first, then "pushed" if any went in)

    async def wait(self) -> None:
        who = starter.get()
        if who is not None:
            go = self.held[who] = asyncio.Event()
            await go.wait()
            if (who, "read") not in self.log:  # its first call, made now
                self.log.append((who, "read"))

    def pushed(self, went_in: list[bool]) -> None:
        who = starter.get()
        if who is not None and any(went_in):
            self.log.append((who, "pushed"))

    def overlapping(self) -> list[tuple[int, int]]:
        """(start, other) for each start that pushed after another's push landed
        between its first read and its own push: it decided on a state gone by."""
        found = []
        for who, what in self.log:
            if what == "pushed":
                since = self.log[self.log.index((who, "read")) : self.log.index((who, "pushed"))]
                found += [(who, other) for other, was in since if was == "pushed"]
        return found

    async def let(self, who: int, task: asyncio.Task[int]) -> None:
        """Start ``who`` makes its next call, and runs up to the one after (or its end)."""
        self.held.pop(who).set()
        while not (task.done() or who in self.held):
            await asyncio.sleep(0)


@contextmanager
def gated(backend: Backend, gates: Gates) -> Iterator[None]:
    names = ("run_started", "statuses", "push")
    for name in names:
        original = getattr(backend, name)

        async def call(
            *args: Any, _original: Any = original, _name: str = name, **kwargs: Any
        ) -> Any:
            await gates.wait()
            answer = await _original(*args, **kwargs)
            if _name == "push":
                gates.pushed(answer)
            return answer

        setattr(backend, name, call)
    try:
        yield
    finally:
        for name in names:
            delattr(backend, name)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    again=st.booleans(),
    # Start i makes its next call to the store; -1: workers run every queued shard.
    steps=st.lists(st.integers(-1, STARTS - 1), max_size=20),
)
async def test_starts_in_any_interleaving_run_each_shard_once_per_start(
    backend: Backend, again: bool, steps: list[int]
) -> None:
    queue = Queue(backend)
    runs: Counter[int] = Counter()

    @queue.sharded(shards=SHARDS, name=f"walk{next(_names)}")
    async def walk(shard: int, shards: int, cursor: int | None) -> None:
        runs[shard] += 1

    if again:
        assert await walk.start("r") == SHARDS
        await fast_worker(queue, burst=True).run()

    async def start(who: int) -> int:
        starter.set(who)
        return await walk.start("r")

    gates = Gates()
    with gated(backend, gates):
        tasks = [asyncio.create_task(start(who)) for who in range(STARTS)]
        while len(gates.held) < len(tasks):
            await asyncio.sleep(0)
        for step in steps:
            if step == -1:
                await fast_worker(queue, burst=True).run()
            elif not tasks[step].done():
                await gates.let(step, tasks[step])
        for who, task in enumerate(tasks):  # the rest one by one, workers running between
            while not task.done():
                await gates.let(who, task)
            await fast_worker(queue, burst=True).run()
        started = [task.result() for task in tasks]
    assert set(started) <= {0, SHARDS}, started  # a start pushes every shard or none
    # As if one after another: a start that read the run before another start's
    # push, and pushed after it, pushed shards that other start had enqueued.
    assert gates.overlapping() == [], gates.log
    times = started.count(SHARDS) + again
    assert started.count(SHARDS) >= 1, started
    assert runs == Counter(dict.fromkeys(range(SHARDS), times)), (started, runs)
