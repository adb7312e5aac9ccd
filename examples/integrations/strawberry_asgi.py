"""Strawberry over ASGI, batched: uvicorn serves strawberry's ASGI app behind batchy's middleware.

Run it: ``python examples/integrations/strawberry_asgi.py --port 8000`` (needs
``pip install batchy[asgi,graphql] strawberry-graphql uvicorn``), then::

    curl -s localhost:8000/graphql -H 'content-type: application/json' \\
         -d '{"query": "{ feed(first: 3) { title author { name } } }"}'

The response's ``extensions`` hold the request's batching stats and the number
of SQL statements the database ran for it.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from collections.abc import Iterator
from typing import Any

import blog_db
import strawberry
import uvicorn
from blog_db import comments_by_post, feed_posts, users_by_id
from strawberry.asgi import GraphQL
from strawberry.extensions import SchemaExtension

from batchy_contrib.graphql.strawberry import BatchyExtension, execution_context_class
from batchy_contrib.web.asgi import BatchyMiddleware


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
    async def author(self) -> User:
        return user(await users_by_id(self.author_id))


@strawberry.type
class Post:
    id: strawberry.ID
    title: str
    author_id: strawberry.Private[int]

    @strawberry.field
    async def author(self) -> User:
        return user(await users_by_id(self.author_id))

    @strawberry.field
    async def comments(self) -> list[Comment]:
        rows = await comments_by_post(int(self.id))
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


class SQLCount(SchemaExtension):
    """Adds ``extensions["sql"]``: the SELECTs the database ran during this operation."""

    def on_operation(self) -> Iterator[None]:
        self.before = blog_db.SELECTS
        yield

    def get_results(self) -> dict[str, Any]:
        return {"sql": blog_db.SELECTS - self.before}


schema = strawberry.Schema(
    query=Query,
    execution_context_class=execution_context_class,  # resolvers batch across the query
    extensions=[BatchyExtension, SQLCount],  # batching stats in the response's extensions
)

# One batchy scope per request: loader caches never outlive it.
app = BatchyMiddleware(GraphQL(schema), log=True)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    sock = socket.create_server((args.host, args.port))
    # The first line says where we listen (the tests read the port from it).
    print(f"listening on http://{args.host}:{sock.getsockname()[1]}/graphql", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    server.run(sockets=[sock])


if __name__ == "__main__":
    main(sys.argv[1:])
