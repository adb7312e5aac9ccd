"""Ariadne on batchy: schema-first resolvers of every style, sync and async, one scope per request.

Run it: ``python examples/graphql/ariadne_app.py`` (ariadne runs on graphql-core
3.2 and 3.3). It runs the feed query through ``ariadne.graphql_sync`` and
``ariadne.graphql`` and prints the batch calls of each.

Pass ``execution_context_class=BatchyExecutionContext`` to ``graphql`` /
``graphql_sync``, or to ariadne's ASGI and WSGI apps
(``ariadne.wsgi.GraphQL(schema, execution_context_class=...)``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

import ariadne
from blog_data import QUERIES, QUERY, SDL, comments_by_post, feed_posts, users_by_id

from batchy_contrib.graphql import BatchyExecutionContext

query = ariadne.QueryType()
post = ariadne.ObjectType("Post")
comment = ariadne.ObjectType("Comment")


@query.field("viewer")
def resolve_viewer(root: Any, info: Any) -> Any:
    return users_by_id(1)  # a loader future


@query.field("feed")
async def resolve_feed(root: Any, info: Any, first: int) -> Any:
    return await feed_posts(first)  # async def


@post.field("author")
@comment.field("author")
def resolve_author(obj: dict[str, Any], info: Any) -> Generator[Any, Any, Any]:
    user = yield users_by_id(obj["author_id"])  # a generator handler
    return user


@post.field("comments")
def resolve_comments(obj: dict[str, Any], info: Any) -> Any:
    return comments_by_post(obj["id"])


schema = ariadne.make_executable_schema(SDL, query, post, comment)
DATA = {"query": QUERY}


def run_sync() -> dict[str, Any]:
    ok, result = ariadne.graphql_sync(schema, DATA, execution_context_class=BatchyExecutionContext)
    assert ok, result
    return result


async def run_async() -> dict[str, Any]:
    ok, result = await ariadne.graphql(schema, DATA, execution_context_class=BatchyExecutionContext)
    assert ok, result
    return result


def main() -> None:
    for name, run in (("sync", run_sync), ("async", lambda: asyncio.run(run_async()))):
        QUERIES.clear()
        result = run()
        assert "errors" not in result, result["errors"]
        print(f"ariadne {name}: {len(result['data']['feed'])} posts, {len(QUERIES)} batch calls")
        for q in QUERIES:
            print("  ", q)


if __name__ == "__main__":
    main()
