"""The blog example of the engine issue: exact batch calls and rounds."""

from __future__ import annotations

import asyncio
from typing import Any

import batchy
from batchy.testing import record

POSTS = {p: {"id": p, "title": f"post {p}"} for p in range(1, 51)}
COMMENT_IDS = {p: [p * 100 + i for i in range(20)] for p in range(1, 51)}
COMMENTS = {
    c: {"id": c, "post_id": p, "user_id": c % 37 + 1} for p, cs in COMMENT_IDS.items() for c in cs
}
calls: list[tuple[str, list[Any]]] = []


@batchy.batched
async def posts_by_id(ids: list[int]) -> list[dict[str, Any]]:
    calls.append(("posts", ids))
    await asyncio.sleep(0.001)
    return [POSTS[i] for i in ids]


@batchy.batched
async def comment_ids_by_post(post_ids: list[int]) -> list[list[int]]:
    calls.append(("comment_ids", post_ids))
    await asyncio.sleep(0.001)
    return [COMMENT_IDS[p] for p in post_ids]


@batchy.batched
def comments_by_id(ids: list[int]) -> dict[int, dict[str, Any]]:
    calls.append(("comments", ids))
    return {i: COMMENTS[i] for i in ids}


@batchy.batched(max_batch_size=500)
async def users_by_id(ids: list[int]) -> list[dict[str, Any]]:
    calls.append(("users", ids))
    await asyncio.sleep(0.001)
    return [{"id": i, "name": f"user {i}"} for i in ids]


@batchy.task
def comment_view(cid: int) -> Any:
    comment = yield comments_by_id(cid)
    author = yield users_by_id(comment["user_id"])
    return {**comment, "author": author}


@batchy.task
def post_view(pid: int) -> Any:
    post, cids = yield posts_by_id(pid), comment_ids_by_post(pid)
    comments = yield [comment_view(c) for c in cids]
    return {**post, "comments": comments}


@batchy.task
async def post_view_async(pid: int) -> Any:
    post = await posts_by_id(pid)
    cids = await comment_ids_by_post(pid)
    comments = await batchy.gather(*(comment_view(c) for c in cids))
    return {**post, "comments": comments}


def naive_post(pid: int) -> dict[str, Any]:
    comments = []
    for c in COMMENT_IDS[pid]:
        comment = COMMENTS[c]
        comments.append(
            {**comment, "author": {"id": comment["user_id"], "name": f"user {comment['user_id']}"}}
        )
    return {**POSTS[pid], "comments": comments}


def test_fifty_posts_take_four_calls_in_three_rounds() -> None:
    calls.clear()
    with record() as rec:
        page = batchy.run(batchy.gather(*(post_view(p) for p in range(1, 51))))
    assert page == [naive_post(p) for p in range(1, 51)]
    assert [name for name, _ in calls] == ["posts", "comment_ids", "comments", "users"]
    assert calls[0] == ("posts", list(range(1, 51)))
    assert calls[1] == ("comment_ids", list(range(1, 51)))
    assert calls[2] == ("comments", [c for p in range(1, 51) for c in COMMENT_IDS[p]])
    assert sorted(calls[3][1]) == list(range(1, 38))  # each user once, deduplicated
    assert rec.rounds == 3
    assert [r.loaders for r in rec.round_events] == [
        ("posts_by_id", "comment_ids_by_post"),
        ("comments_by_id",),
        ("users_by_id",),
    ]


def test_async_handlers_share_batches_with_generators() -> None:
    calls.clear()
    page = batchy.run(batchy.gather(post_view(1), post_view_async(2)))
    assert page == [naive_post(1), naive_post(2)]
    # The async handler awaits posts and comment ids one after the other, so
    # comment ids for post 2 join the round of post 1's comments.
    assert calls[0] == ("posts", [1, 2])
    assert len([c for c in calls if c[0] == "users"]) <= 2


def test_tasks_are_awaitable_from_asyncio() -> None:
    calls.clear()

    async def main() -> Any:
        return await post_view(3)

    assert asyncio.run(main()) == naive_post(3)
    assert [name for name, _ in calls] == ["posts", "comment_ids", "comments", "users"]
