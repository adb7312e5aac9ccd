"""Graphene 3 on batchy: generator and future resolvers, sync and async, one scope per request.

Run it: ``python examples/graphql/graphene_app.py`` (needs graphene 3, which
needs graphql-core 3.2). It runs the feed query through graphene's sync
``schema.execute`` (as a Flask or Django view would) and its async
``execute_async``, and prints the batch calls of each.

The batchy-specific part is ``execution_context_class=BatchyExecutionContext``
on each call: it batches across the whole query, runs generator resolvers as
batchy handlers, and gives each request its own scope.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

import graphene
from blog_data import QUERIES, QUERY, comments_by_post, feed_posts, users_by_id

from batchy_contrib.graphql import BatchyExecutionContext


class User(graphene.ObjectType):
    id = graphene.ID(required=True)
    name = graphene.String(required=True)


class Comment(graphene.ObjectType):
    id = graphene.ID(required=True)
    body = graphene.String(required=True)
    author = graphene.Field(User, required=True)

    @staticmethod
    def resolve_author(comment: dict[str, Any], info: Any) -> Any:
        return users_by_id(comment["author_id"])  # a loader future: batchy awaits it


class Post(graphene.ObjectType):
    id = graphene.ID(required=True)
    title = graphene.String(required=True)
    author = graphene.Field(User, required=True)
    comments = graphene.List(graphene.NonNull(Comment), required=True)

    @staticmethod
    def resolve_author(post: dict[str, Any], info: Any) -> Generator[Any, Any, Any]:
        author = yield users_by_id(post["author_id"])  # a generator handler
        return author

    @staticmethod
    async def resolve_comments(post: dict[str, Any], info: Any) -> Any:
        return await comments_by_post(post["id"])  # async def works as well


class Query(graphene.ObjectType):
    viewer = graphene.Field(User, required=True)
    feed = graphene.List(
        graphene.NonNull(Post), required=True, first=graphene.Int(default_value=10)
    )

    @staticmethod
    def resolve_viewer(root: Any, info: Any) -> Any:
        return users_by_id(1)

    @staticmethod
    def resolve_feed(root: Any, info: Any, first: int) -> Any:
        return feed_posts(first)


schema = graphene.Schema(query=Query)


def run_sync() -> Any:
    """What a Flask or Django view does: no event loop in sight."""
    return schema.execute(QUERY, execution_context_class=BatchyExecutionContext)


async def run_async() -> Any:
    return await schema.execute_async(QUERY, execution_context_class=BatchyExecutionContext)


def main() -> None:
    for name, run in (("sync", run_sync), ("async", lambda: asyncio.run(run_async()))):
        QUERIES.clear()
        result = run()
        assert result.errors is None, result.errors
        print(f"graphene {name}: {len(result.data['feed'])} posts, {len(QUERIES)} batch calls")
        for q in QUERIES:
            print("  ", q)


if __name__ == "__main__":
    main()
