"""Strawberry on batchy: resolvers load through batchy loaders, one scope per request.

Run it: ``python examples/graphql/strawberry_app.py`` (needs strawberry-graphql,
which needs graphql-core 3.3). It runs the feed query and prints the batch calls.

The only batchy-specific line is the schema's ``execution_context_class``:
strawberry's own class, made to run on batchy with :func:`with_batchy`. Each
execution gets its own batchy scope, so loader caches live for one request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

import strawberry
from blog_data import QUERIES, QUERY, comments_by_post, feed_posts, users_by_id
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from batchy_contrib.graphql import with_batchy


@strawberry.type
class User:
    id: strawberry.ID
    name: str


def user(row: dict[str, Any]) -> User:
    return User(id=strawberry.ID(str(row["id"])), name=row["name"])


@strawberry.type
class Comment:
    id: strawberry.ID
    body: str
    author_id: strawberry.Private[int]

    @strawberry.field
    async def author(self) -> User:  # async def: await the loader
        return user(await users_by_id(self.author_id))


@strawberry.type
class Post:
    id: strawberry.ID
    title: str
    author_id: strawberry.Private[int]

    @strawberry.field
    async def author(self) -> User:
        return user(await users_by_id(self.author_id))

    @strawberry.field(graphql_type=list[Comment])
    def comments(self) -> Generator[Any, Any, list[Comment]]:
        # A generator handler: yield what it waits on (batchy runs it as a task).
        rows = yield comments_by_post(int(self.id))
        return [
            Comment(id=strawberry.ID(str(r["id"])), body=r["body"], author_id=r["author_id"])
            for r in rows
        ]


@strawberry.type
class Query:
    @strawberry.field
    async def viewer(self) -> User:
        return user(await users_by_id(1))

    @strawberry.field
    async def feed(self, first: int = 10) -> list[Post]:
        rows = await feed_posts(first)
        return [
            Post(id=strawberry.ID(str(r["id"])), title=r["title"], author_id=r["author_id"])
            for r in rows
        ]


schema = strawberry.Schema(
    query=Query,
    execution_context_class=with_batchy(StrawberryGraphQLCoreExecutionContext),
)


async def main() -> None:
    QUERIES.clear()
    result = await schema.execute(QUERY)
    assert result.errors is None, result.errors
    print(f"{len(result.data['feed'])} posts, {len(QUERIES)} batch calls:")  # type: ignore[index]
    for q in QUERIES:
        print("  ", q)


if __name__ == "__main__":
    asyncio.run(main())
