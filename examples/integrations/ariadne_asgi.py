"""Ariadne over ASGI, batched: uvicorn serves ariadne's ASGI app behind batchy's middleware.

Run it: ``python examples/integrations/ariadne_asgi.py --port 8000`` (needs
``pip install batchy[asgi,graphql] ariadne uvicorn``), then::

    curl -s localhost:8000/graphql -H 'content-type: application/json' \\
         -d '{"query": "{ feed(first: 3) { title author { name } } }"}'

The response's ``extensions`` hold the request's batching stats and the number
of SQL statements the database ran for it. Ariadne runs on graphql-core 3.2 and
3.3; the same file serves on both.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from typing import Any

import ariadne
import blog_db
import uvicorn
from ariadne.asgi import GraphQL
from ariadne.asgi.handlers import GraphQLHTTPHandler
from blog_db import comments_by_post, feed_posts, users_by_id

from batchy_contrib.graphql import BatchyExecutionContext
from batchy_contrib.web.asgi import BatchyMiddleware, current_stats

SDL = """
type Query { viewer: User!, feed(first: Int = 10): [Post!]! }
type User { id: ID!, name: String! }
type Post { id: ID!, title: String!, author: User!, comments: [Comment!]! }
type Comment { id: ID!, body: String!, author: User! }
"""

query = ariadne.QueryType()
post = ariadne.ObjectType("Post")
comment = ariadne.ObjectType("Comment")


# Rows are dicts: ``id``, ``title``, ``name`` and ``body`` need no resolver.
@query.field("viewer")
async def resolve_viewer(root: Any, info: Any) -> Any:
    return await users_by_id(1)


@query.field("feed")
async def resolve_feed(root: Any, info: Any, first: int) -> Any:
    return await feed_posts(first)


@post.field("author")
@comment.field("author")
async def resolve_author(row: dict[str, Any], info: Any) -> Any:
    return await users_by_id(row["author_id"])


@post.field("comments")
def resolve_comments(row: dict[str, Any], info: Any) -> Any:
    return comments_by_post(row["id"])  # a loader future, awaited by the executor


schema = ariadne.make_executable_schema(SDL, query, post, comment)


class StatsHTTPHandler(GraphQLHTTPHandler):
    """Adds the request's batching stats and SQL count to each response's ``extensions``.

    Not an ariadne ``Extension``: ariadne runs extensions as graphql-core middleware
    around every resolver, the default ones included, and the executor would then
    call a wrapper for each field it otherwise reads straight from the row.
    """

    async def execute_graphql_query(self, request: Any, data: Any, **options: Any) -> Any:
        before = blog_db.SELECTS
        success, result = await super().execute_graphql_query(request, data, **options)
        stats = current_stats()  # the middleware's, also request.state.batchy
        if stats is not None:
            extensions = result.setdefault("extensions", {})
            extensions["batchy"] = stats.as_dict()
            extensions["sql"] = blog_db.SELECTS - before
        return success, result


graphql_app = GraphQL(
    schema,
    execution_context_class=BatchyExecutionContext,  # resolvers batch across the query
    http_handler=StatsHTTPHandler(),
)

# One batchy scope per request: loader caches never outlive it.
app = BatchyMiddleware(graphql_app, log=True)


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
