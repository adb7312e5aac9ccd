"""The cache guides' example (docs/guides/22-memcache.rst, 23-cache-pattern.rst).

python examples/blog/guide_cache.py 127.0.0.1:11211
"""

import asyncio
import sys
import uuid

import batchy
from batchy.testing import record
from batchy_contrib.cache import memcache

USERS = {1: {"id": 1, "name": "ada"}, 2: {"id": 2, "name": "bob"}}


@batchy.batched
async def users_by_id(ids: list[int]) -> list[dict[str, object] | None]:
    return [USERS.get(i) for i in ids]  # stands for the database query


async def main(server: str) -> None:
    client = memcache.connect(server)  # thread-safe PooledClient, pickled values
    users = memcache.cached(
        users_by_id,
        client,
        ttl=300,  # seconds in memcached
        prefix=f"guide:{uuid.uuid4().hex[:6]}:users:",  # change it to start afresh
    )

    async def page() -> list[object]:
        async with batchy.scope():  # one request
            return await batchy.gather(users(1), users(2), users(3))

    with record() as rec:
        print(await page())  # cold: one get_many, then the misses in one batch
        print(await page())  # warm: one get_many, no call to users_by_id
    print("users_by_id calls:", rec.calls(users_by_id))
    print(users.stats)

    USERS[1] = {"id": 1, "name": "ada lovelace"}  # a write ...
    users.delete(1)  # ... and its invalidation (await users.adelete(1) in async code)
    print(await page())

    down = memcache.cached(users_by_id, memcache.connect("127.0.0.1:9"), name="down")
    print(await down(2), down.stats)  # memcached unreachable: served, counted, logged


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:11211"))
