"""Real asyncio clients awaited inside ``async def`` handlers (they ask asyncio for the current task)."""

from __future__ import annotations

import uuid
from typing import Any

import redis.asyncio as aioredis

import batchy
from batchy.testing import record


def test_redis_client_inside_handlers_while_loads_still_batch(
    redis_server: tuple[str, int],
) -> None:
    host, port = redis_server
    prefix = f"batchy-test:{uuid.uuid4().hex}:"
    calls: list[list[int]] = []

    @batchy.batched
    async def users_by_id(ids: list[int]) -> list[str]:
        calls.append(ids)
        return [f"user {i}" for i in ids]

    @batchy.task
    async def profile(client: aioredis.Redis, uid: int) -> Any:
        user = await users_by_id(uid)
        await client.set(f"{prefix}{uid}", f"avatar {uid}")
        avatar = await client.get(f"{prefix}{uid}")
        return user, avatar

    @batchy.task
    async def page() -> Any:
        client = aioredis.Redis(host=host, port=port, db=13, decode_responses=True)
        try:
            return await batchy.gather(*(profile(client, uid) for uid in range(3)))
        finally:
            keys = [k async for k in client.scan_iter(f"{prefix}*")]
            if keys:
                await client.delete(*keys)
            await client.aclose()

    with record() as rec:
        result = batchy.run(page())
    assert result == [(f"user {i}", f"avatar {i}") for i in range(3)]
    assert calls == [[0, 1, 2]]
    assert rec.rounds == 1
