"""The GraphQL issue's acceptance case: 3 rounds and at most 5 batch calls, in every resolver style.

Styles: plain functions returning loader futures, generator handlers, ``async
def`` resolvers, and uneven resolvers (some take two extra loop hops before
they load, which splits the batches of call_soon-based DataLoaders). Each runs
async and sync, through our entry points and through graphql-core's own with
the execution context class, on whichever graphql-core line is installed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import graphql as gql
import pytest
from blog_data import (
    COMMENTS,
    POSTS,
    QUERY,
    SDL,
    USERS,
    VIEWER_ID,
    comments_by_post,
    feed_posts,
    users_by_id,
)

import batchy
from batchy.dataloader import DataLoader
from batchy.testing import record
from batchy_contrib import graphql as bgql

Resolver = Callable[..., Any]


def futures_style() -> dict[str, Resolver]:
    return {
        "viewer": lambda root, info: users_by_id(VIEWER_ID),
        "feed": lambda root, info, first: feed_posts(first),
        "post_author": lambda post, info: users_by_id(post["author_id"]),
        "comments": lambda post, info: comments_by_post(post["id"]),
        "comment_author": lambda comment, info: users_by_id(comment["author_id"]),
    }


def generator_style() -> dict[str, Resolver]:
    def viewer(root: Any, info: Any) -> Any:
        return (yield users_by_id(VIEWER_ID))

    def feed(root: Any, info: Any, first: int) -> Any:
        posts = yield feed_posts(first)
        return posts

    def author(obj: Any, info: Any) -> Any:
        user = yield users_by_id(obj["author_id"])
        return user

    def comments(post: Any, info: Any) -> Any:
        return (yield comments_by_post(post["id"]))

    return {
        "viewer": viewer,
        "feed": feed,
        "post_author": author,
        "comments": comments,
        "comment_author": author,
    }


def async_style() -> dict[str, Resolver]:
    async def viewer(root: Any, info: Any) -> Any:
        return await users_by_id(VIEWER_ID)

    async def feed(root: Any, info: Any, first: int) -> Any:
        return await feed_posts(first)

    async def author(obj: Any, info: Any) -> Any:
        return await users_by_id(obj["author_id"])

    async def comments(post: Any, info: Any) -> Any:
        return await comments_by_post(post["id"])

    return {
        "viewer": viewer,
        "feed": feed,
        "post_author": author,
        "comments": comments,
        "comment_author": author,
    }


def uneven_style() -> dict[str, Resolver]:
    # Odd objects take two loop hops before they load; even ones load at once.
    # Both handler kinds are mixed: generators for authors, async def elsewhere.
    async def viewer(root: Any, info: Any) -> Any:
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return await users_by_id(VIEWER_ID)

    async def feed(root: Any, info: Any, first: int) -> Any:
        return await feed_posts(first)

    def author(obj: Any, info: Any) -> Any:
        if obj["id"] % 2:
            yield asyncio.sleep(0)
            yield asyncio.sleep(0)
        return (yield users_by_id(obj["author_id"]))

    async def comments(post: Any, info: Any) -> Any:
        if post["id"] % 2:
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        return await comments_by_post(post["id"])

    return {
        "viewer": viewer,
        "feed": feed,
        "post_author": author,
        "comments": comments,
        "comment_author": author,
    }


def task_style() -> dict[str, Resolver]:
    # @batchy.task handlers as resolvers (a task is awaitable: nothing to convert).
    @batchy.task
    def author(obj: Any, info: Any) -> Any:
        return (yield users_by_id(obj["author_id"]))

    @batchy.task
    async def comments(post: Any, info: Any) -> Any:
        return await comments_by_post(post["id"])

    styles = futures_style()
    styles.update(post_author=author, comment_author=author, comments=comments)
    return styles


def dataloader_style() -> dict[str, Resolver]:
    # batchy.DataLoader, as code migrated from aiodataloader / strawberry uses it
    # (one instance per request: make_schema runs once per test).
    users = DataLoader(users_by_id.__wrapped__, name=users_by_id.name)
    feed = DataLoader(feed_posts.__wrapped__, name=feed_posts.name)
    comments = DataLoader(comments_by_post.__wrapped__, name=comments_by_post.name)

    async def author(obj: Any, info: Any) -> Any:
        if obj["id"] % 2:
            await asyncio.sleep(0)
        return await users.load(obj["author_id"])

    return {
        "viewer": lambda root, info: users.load(VIEWER_ID),
        "feed": lambda root, info, first: feed.load(first),
        "post_author": author,
        "comments": lambda post, info: comments.load(post["id"]),
        "comment_author": author,
    }


STYLES = {
    "futures": futures_style,
    "generators": generator_style,
    "async": async_style,
    "uneven": uneven_style,
    "tasks": task_style,
    "dataloader": dataloader_style,
}


def make_schema(style: str) -> gql.GraphQLSchema:
    resolvers = STYLES[style]()
    schema = gql.build_schema(SDL)
    query = schema.query_type
    assert query is not None
    query.fields["viewer"].resolve = resolvers["viewer"]
    query.fields["feed"].resolve = resolvers["feed"]
    post = schema.get_type("Post")
    comment = schema.get_type("Comment")
    assert isinstance(post, gql.GraphQLObjectType)
    assert isinstance(comment, gql.GraphQLObjectType)
    post.fields["author"].resolve = resolvers["post_author"]
    post.fields["comments"].resolve = resolvers["comments"]
    comment.fields["author"].resolve = resolvers["comment_author"]
    return schema


def expected() -> dict[str, Any]:
    def user(i: int) -> dict[str, Any]:
        return {"id": str(i), "name": USERS[i]["name"]}

    return {
        "viewer": user(VIEWER_ID),
        "feed": [
            {
                "id": str(p["id"]),
                "title": p["title"],
                "author": user(p["author_id"]),
                "comments": [
                    {"id": str(c["id"]), "body": c["body"], "author": user(c["author_id"])}
                    for c in COMMENTS[p["id"]]
                ],
            }
            for p in POSTS
        ],
    }


def class_kwargs() -> dict[str, Any]:
    name = "executor_class" if bgql.GRAPHQL_CORE_33 else "execution_context_class"
    return {name: bgql.BatchyExecutionContext}


async def run_ours_async(schema: gql.GraphQLSchema) -> gql.ExecutionResult:
    return await bgql.graphql(schema, QUERY)


async def run_core_async(schema: gql.GraphQLSchema) -> gql.ExecutionResult:
    return await gql.graphql(schema, QUERY, **class_kwargs())


def run_ours_sync(schema: gql.GraphQLSchema) -> gql.ExecutionResult:
    return bgql.graphql_sync(schema, QUERY)


def run_core_sync(schema: gql.GraphQLSchema) -> gql.ExecutionResult:
    return gql.graphql_sync(schema, QUERY, **class_kwargs())


def check(result: gql.ExecutionResult, rec: Any) -> None:
    assert result.errors is None, result.errors
    assert result.data == expected()
    assert rec.rounds == 3, rec.report()
    assert sum(rec.call_counts().values()) <= 5, rec.report()
    # Keys in sorted order: uneven resolvers file them in another order.
    assert sorted_calls(rec, feed_posts) == [[10]]
    assert sorted_calls(rec, comments_by_post) == [list(range(1, 11))]
    # users: the viewer, then the other post authors, then the commenters not seen yet
    assert sorted_calls(rec, users_by_id) == [[1], [2, 3, 4], list(range(5, 13))], rec.report()


def sorted_calls(rec: Any, loader: Any) -> list[list[Any]]:
    return [sorted(keys) for keys in rec.calls(loader)]


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("runner", [run_ours_async, run_core_async])
async def test_async_execution_takes_three_rounds(style: str, runner: Any) -> None:
    schema = make_schema(style)
    with record() as rec:
        result = await runner(schema)
    check(result, rec)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("runner", [run_ours_sync, run_core_sync])
def test_sync_execution_takes_three_rounds(style: str, runner: Any) -> None:
    schema = make_schema(style)
    with record() as rec:
        result = runner(schema)
    check(result, rec)


async def test_requests_do_not_share_a_cache() -> None:
    schema = make_schema("futures")
    with record() as rec:
        first, second = await asyncio.gather(
            bgql.graphql(schema, "{ viewer { id } }"), bgql.graphql(schema, "{ viewer { id } }")
        )
        third = await bgql.graphql(schema, "{ viewer { id } }")
    assert first.data == second.data == third.data == {"viewer": {"id": "1"}}
    # Concurrent requests share a batch (one call), each keeps its own cache:
    # the third request asks again.
    assert rec.calls(users_by_id) == [[1], [1]]
