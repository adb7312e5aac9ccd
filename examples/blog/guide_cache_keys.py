"""The memcache guide's key example (docs/guides/22-memcache.rst, "Keys").

python examples/blog/guide_cache_keys.py 127.0.0.1:11211
"""

import asyncio
import sys
from dataclasses import dataclass
from typing import Any

import batchy
from batchy_contrib.cache import memcache


@dataclass(eq=False)
class User:
    id: int
    name: str


@batchy.batched
async def greeting(keys: list[Any]) -> list[str]:
    return [f"hello {k!r}" for k in keys]  # stands for the database query


def show(results: list[object]) -> None:
    for result in results:
        print(
            "  ", f"{type(result).__name__}: {result}" if isinstance(result, Exception) else result
        )


async def main(server: str) -> None:
    client = memcache.connect(server)
    greet = memcache.cached(greeting, client, prefix="guide:greeting:")
    for key in [7, "7", 7.0, True, (7, "en"), "a b:c", None]:
        print(f"{key!r:>10} -> {greet.memcache_key(key)}")

    async with batchy.scope():  # 7 and "7": two keys, two entries, two values
        show(await batchy.gather(greet(7), greet("7")))
        # A key with no canonical text is refused, and fails alone.
        ada = User(1, "ada")
        show(await batchy.gather(greet(8), greet(ada), return_exceptions=True))

    by_id = memcache.cached(greeting, client, prefix="guide:by-id:", key=lambda u: u.id)
    print(by_id.memcache_key(ada))  # key= maps a user to its id: one entry per id

    # memcache.loader reads entries other code wrote: its keys are the text of
    # memcached keys, so str; key=str reads an int as its digits.
    client.set("guide:session:1", "ada's session")
    sessions = memcache.loader(client, prefix="guide:session:", name="sessions")
    async with batchy.scope():
        show(await batchy.gather(sessions("1"), sessions(1), return_exceptions=True))
    by_number = memcache.loader(client, prefix="guide:session:", name="by_number", key=str)
    print(await by_number(1))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:11211"))
