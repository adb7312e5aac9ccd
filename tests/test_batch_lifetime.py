"""A batch call in flight is held by the scheduler: garbage collection never strands its keys."""

from __future__ import annotations

import asyncio
import gc
import weakref

import batchy


async def test_a_running_batch_call_is_not_collected() -> None:
    calls: list[list[int]] = []

    @batchy.batched
    async def slow(keys: list[int]) -> list[int]:
        calls.append(keys)
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        ref = weakref.ref(waiter)
        # Only this call's frame holds the future it awaits (as a socket's reader
        # waiter is held): nothing outside references the call's task.
        loop.call_later(0.05, lambda: (w := ref()) is not None and w.set_result(None))
        await waiter
        return [k * 10 for k in keys]

    async def collect() -> None:
        await asyncio.sleep(0.02)
        gc.collect()

    collector = asyncio.ensure_future(collect())
    values = await asyncio.wait_for(batchy.gather(slow(1), slow(2)), 2)
    await collector
    assert values == [10, 20]
    assert calls == [[1, 2]]
