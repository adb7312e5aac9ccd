"""The GraphQL benchmarks' data and schemas: the feed at any size, and the list of scalars.

Shared by the in-process tables (``benchmarks/graphql.py``) and the HTTP servers
(``benchmarks/_graphql_http.py``), so that every contender reads the same rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import graphql as gql

import batchy

FEED_SDL = """
type Query { viewer: User!, feed(first: Int = 10): [Post!]! }
type User { id: ID!, name: String! }
type Post { id: ID!, title: String!, author: User!, comments: [Comment!]! }
type Comment { id: ID!, body: String!, author: User! }
"""

FEED_QUERY = """{{
  viewer {{ id name }}
  feed(first: {posts}) {{
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


class Feed:
    """The feed of the GraphQL issues at a given size: posts, their comments, every author.

    Post ``p`` is by user ``(p - 1) % 10 + 1``; comment ``c`` by user
    ``(c - 1) % users + 1``. ``batch_functions`` are the ``async def`` batch
    functions every contender shares; ``batched`` the same as batchy loaders.
    """

    def __init__(self, posts: int, comments: int, users: int) -> None:
        self.posts, self.comments_per_post, self.n_users = posts, comments, users
        self.counter = Counter()
        self.users = {i: {"id": i, "name": f"user {i}"} for i in range(1, users + 1)}
        self.post_rows = [
            {"id": p, "title": f"post {p}", "author_id": (p - 1) % 10 + 1}
            for p in range(1, posts + 1)
        ]
        self.comments = {
            p: [
                {"id": c, "body": f"comment {c}", "author_id": (c - 1) % users + 1}
                for c in range(comments * (p - 1) + 1, comments * p + 1)
            ]
            for p in range(1, posts + 1)
        }
        self.query = FEED_QUERY.format(posts=posts)
        self.in_memory: dict[str, Callable[[Any], Any]] = {
            "users": self.users.get,
            "feed": lambda n: self.post_rows[:n],
            "comments": lambda p: self.comments.get(p, []),
        }
        self.batch_functions = {
            "users": self._named("users_by_id", self.users.get),
            "feed": self._named("feed_posts", lambda n: self.post_rows[:n]),
            "comments": self._named("comments_by_post", lambda p: self.comments.get(p, [])),
        }
        self.batched = {name: batchy.batched(fn) for name, fn in self.batch_functions.items()}

    def __str__(self) -> str:
        return f"{self.posts:,} posts x {self.comments_per_post} comments"

    def _named(self, name: str, get: Callable[[Any], Any]) -> Callable[[list[Any]], Any]:
        async def load(keys: list[Any]) -> list[Any]:
            self.counter.hit()
            return [get(k) for k in keys]

        load.__name__ = load.__qualname__ = name  # batchy names a loader after its function
        return load

    def schema(self, get: Callable[[Any, str], Callable[[Any], Any]], uneven: bool = False) -> Any:
        """The schema, with resolvers that load through ``get(info, loader_name)(key)``.

        ``uneven``: resolvers of odd objects take two loop hops (``asyncio.sleep(0)``)
        before they load, as a permission check or a second await would.
        """
        schema = gql.build_schema(FEED_SDL)
        query = schema.query_type
        post = schema.get_type("Post")
        comment = schema.get_type("Comment")
        if not (query and isinstance(post, gql.GraphQLObjectType)):
            raise TypeError("the feed schema lost its types")
        if not isinstance(comment, gql.GraphQLObjectType):
            raise TypeError("the feed schema lost its types")

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

    def loaders(self, cls: Any) -> dict[str, Any]:
        """Per-request DataLoader instances of ``cls``, as a request's context holds them."""
        return {name: cls(fn) for name, fn in self.batch_functions.items()}


LIST_SDL = """
type Query { items(first: Int!): [Item!]! }
type Item {
  id: ID!, name: String!, sku: String!, price: Float!, stock: Int!,
  rating: Float, active: Boolean!, category: String, created: String!, views: Int!
}
"""


class ItemList:
    """A list of ``size`` items with 10 scalar fields each, loaded in one call.

    Each field is read from a dict by graphql-core's default resolver and
    serialized as its scalar type; two are null now and then.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.rows = [
            {
                "id": i,
                "name": f"item {i}",
                "sku": f"SKU-{i:06d}",
                "price": i * 0.25,
                "stock": i % 97,
                "rating": (i % 50) / 10 if i % 7 else None,
                "active": i % 3 != 0,
                "category": f"category {i % 20}" if i % 11 else None,
                "created": "2026-11-24T12:00:00Z",
                "views": i * 3,
            }
            for i in range(1, size + 1)
        ]
        fields = "id name sku price stock rating active category created views"
        self.query = f"{{ items(first: {size}) {{ {fields} }} }}"

        async def items_page(firsts: list[int]) -> list[Any]:
            return [self.rows[:n] for n in firsts]

        self.batch_function = items_page
        self.batched = batchy.batched(items_page)

    def __str__(self) -> str:
        return f"{self.size:,} items x 10 scalar fields"

    def schema(self, resolve: Callable[[Any, Any, int], Any]) -> Any:
        """The list schema, ``items`` resolved by ``resolve(root, info, first)``."""
        schema = gql.build_schema(LIST_SDL)
        if schema.query_type is None:
            raise TypeError("the list schema lost its query type")
        schema.query_type.fields["items"].resolve = resolve
        return schema
