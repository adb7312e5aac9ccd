"""Per-scope statistics: what each of two concurrent requests cost, read inside and after it.

::

    python examples/scope_stats.py
"""

from __future__ import annotations

import asyncio
from typing import Any

import batchy

FRIENDS = {1: [2, 3], 2: [1, 3]}
CALLS: dict[str, list[list[int]]] = {"users_by_id": [], "friends_of": []}


@batchy.batched
async def users_by_id(ids: list[int]) -> list[dict[str, Any]]:
    CALLS["users_by_id"].append(ids)
    await asyncio.sleep(0.001)  # a database round trip
    return [{"id": i, "name": f"user{i}"} for i in ids]


@batchy.batched
async def friends_of(ids: list[int]) -> list[list[int]]:
    CALLS["friends_of"].append(ids)
    await asyncio.sleep(0.001)
    return [FRIENDS[i] for i in ids]


@batchy.task
async def profile(uid: int) -> dict[str, Any]:
    user, friends = await batchy.gather(users_by_id(uid), friends_of(uid))
    names = [f["name"] for f in await users_by_id.many(friends)]
    await users_by_id(uid)  # asked again: the request's cache answers (a hit)
    stats = batchy.current_scope().stats  # type: ignore[union-attr]  # this request's, so far
    return {**user, "friends": names, "rounds so far": stats.rounds}


async def request(uid: int) -> tuple[dict[str, Any], batchy.ScopeStats]:
    async with batchy.scope(f"GET /profile/{uid}") as scope:
        page = await profile(uid)
    return page, scope.stats


async def main() -> None:
    # Two requests at once: their keys share batch calls, each keeps its own stats.
    for page, stats in await asyncio.gather(request(1), request(2)):
        print(f"GET /profile/{page['id']}: {page['rounds so far']} rounds")
        print(f"  calls {stats.calls}")
        print(f"  keys  {stats.keys}")
        print(f"  hits  {stats.hits}")
        print(f"  waited on batches: {stats.waited * 1000:.1f} ms")
    print(f"the loaders were called: {CALLS}")


if __name__ == "__main__":
    asyncio.run(main())
