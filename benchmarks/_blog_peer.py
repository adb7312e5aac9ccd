"""The blog page for aiodataloader, written as its users write it: the data-source benchmarks' peer.

One ``DataLoader`` per table, made per request, coroutine handlers, children
gathered; the same database object and SQL as batchy's loaders. On PostgreSQL
the keys go as one array (``WHERE id = ANY(%s)``), as psycopg users write it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiodataloader import DataLoader

__all__ = ["PeerLoaders", "keys", "render_peer"]


class PeerLoaders:
    """One DataLoader per table, made per request; same SQL and database as batchy's loaders."""

    def __init__(self, db: Any) -> None:
        self.batch_calls = 0
        self.posts = DataLoader(self._by_id(db, "blog_posts"))
        self.comments = DataLoader(self._by_id(db, "blog_comments"))
        self.users = DataLoader(self._by_id(db, "blog_users"))
        self.comment_ids = DataLoader(self._comment_ids(db))

    def _by_id(self, db: Any, table: str) -> Callable[[list[int]], Awaitable[Any]]:
        sql = f"SELECT * FROM {db.dialect.q(table)} WHERE {db.dialect.q('id')} "

        async def batch_load_fn(ids: list[int]) -> list[Any]:
            self.batch_calls += 1
            rows = await db.fetch(sql + db.dialect.in_keys(len(ids)), keys(db, ids))
            by_id = {r["id"]: r for r in rows}
            return [by_id.get(i) for i in ids]

        return batch_load_fn

    def _comment_ids(self, db: Any) -> Callable[[list[int]], Awaitable[Any]]:
        async def batch_load_fn(post_ids: list[int]) -> list[Any]:
            self.batch_calls += 1
            rows = await db.fetch(
                "SELECT post_id, id FROM blog_comments WHERE post_id "
                f"{db.dialect.in_keys(len(post_ids))} ORDER BY id",
                keys(db, post_ids),
            )
            grouped: dict[int, list[int]] = {p: [] for p in post_ids}
            for r in rows:
                grouped[r["post_id"]].append(r["id"])
            return [grouped[p] for p in post_ids]

        return batch_load_fn


def keys(db: Any, ids: list[int]) -> list[Any]:
    """The parameters for ``ids``: one each, or (PostgreSQL) one list psycopg sends as an array."""
    return [ids] if db.dialect.array else ids


async def peer_comment(loaders: PeerLoaders, cid: int) -> Any:
    comment = await loaders.comments.load(cid)
    author = await loaders.users.load(comment["user_id"])
    return {**comment, "author": author}


async def peer_post(loaders: PeerLoaders, pid: int) -> Any:
    post, cids = await asyncio.gather(loaders.posts.load(pid), loaders.comment_ids.load(pid))
    comments = await asyncio.gather(*(peer_comment(loaders, c) for c in cids))
    return {**post, "comments": list(comments)}


async def render_peer(db: Any, post_ids: list[int]) -> tuple[list[Any], int]:
    loaders = PeerLoaders(db)
    page = await asyncio.gather(*(peer_post(loaders, p) for p in post_ids))
    return list(page), loaders.batch_calls
