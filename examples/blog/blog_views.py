"""The blog page (posts, their comments, each comment's author) three ways.

1. naive: one query per row, 2 + 2N per post;
2. batchy loaders on the database: one query per loader per round, 4 in 3 rounds;
3. the same loaders with memcached in front (``batchy_contrib.cache.memcache.cached``).

The handlers are the same for 2 and 3: only the loaders in :class:`Blog` change.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import batchy
from batchy_contrib.cache import memcache

Row = dict[str, Any]


@dataclass
class Blog:
    """The four loaders the page needs."""

    posts_by_id: batchy.Loader[int, Row | None]
    comment_ids_by_post: batchy.Loader[int, list[int]]
    comments_by_id: batchy.Loader[int, Row | None]
    users_by_id: batchy.Loader[int, Row | None]

    def all(self) -> list[batchy.Loader[Any, Any]]:
        return [getattr(self, f.name) for f in fields(self)]


def loaders(db: Any) -> Blog:
    """The blog's loaders over a ``batchy_contrib`` MySQL or SQLite database."""
    return Blog(
        posts_by_id=db.one("blog_posts", name="posts_by_id"),
        comment_ids_by_post=db.query(
            "SELECT post_id, id FROM blog_comments WHERE post_id IN {keys} ORDER BY id",
            key="post_id",
            many=True,
            row=lambda post_id, id: id,  # keep only the comment id
            name="comment_ids_by_post",
        ),
        comments_by_id=db.one("blog_comments", name="comments_by_id"),
        users_by_id=db.one("blog_users", name="users_by_id"),
    )


def cached(blog: Blog, client: Any, *, ttl: int = 300, namespace: str = "blog:v1") -> Blog:
    """The same loaders with memcached in front of each, keys under ``namespace``."""
    return Blog(
        *(
            memcache.cached(loader, client, ttl=ttl, prefix=f"{namespace}:{loader.name}:")
            for loader in blog.all()
        )
    )


# -- the handlers (the same as in the engine's tutorial) -----------------------------


@batchy.task
def comment_view(blog: Blog, cid: int) -> Any:
    comment = yield blog.comments_by_id(cid)
    author = yield blog.users_by_id(comment["user_id"])
    return {**comment, "author": author}


@batchy.task
def post_view(blog: Blog, pid: int) -> Any:
    post, cids = yield blog.posts_by_id(pid), blog.comment_ids_by_post(pid)
    comments = yield [comment_view(blog, c) for c in cids]
    return {**post, "comments": comments}


async def render_batchy(blog: Blog, post_ids: list[int]) -> list[Row]:
    """The page with batchy, in a fresh scope (nothing cached from an earlier render)."""
    async with batchy.scope():
        return await batchy.gather(*(post_view(blog, p) for p in post_ids))


# -- naive: what the code looks like without batching --------------------------------


async def render_naive(db: Any, post_ids: list[int]) -> list[Row]:
    """The page with one query per row: 2 + 2N queries per post."""
    p = db.dialect.param
    page = []
    for pid in post_ids:
        (post,) = await db.fetch(f"SELECT * FROM blog_posts WHERE id = {p}", [pid])
        rows = await db.fetch(
            f"SELECT post_id, id FROM blog_comments WHERE post_id = {p} ORDER BY id", [pid]
        )
        comments = []
        for cid in (r["id"] for r in rows):
            (comment,) = await db.fetch(f"SELECT * FROM blog_comments WHERE id = {p}", [cid])
            (author,) = await db.fetch(
                f"SELECT * FROM blog_users WHERE id = {p}", [comment["user_id"]]
            )
            comments.append({**comment, "author": author})
        page.append({**post, "comments": comments})
    return page


# -- a write, and the invalidation it needs ------------------------------------------


async def add_comment(db: Any, blog: Blog, post_id: int, user_id: int, body: str) -> int:
    """Insert a comment and invalidate the cached comment list of its post."""
    p = db.dialect.param
    (row,) = await db.fetch("SELECT COALESCE(MAX(id), 0) + 1 AS id FROM blog_comments")
    cid = int(row["id"])
    await db.execute(
        f"INSERT INTO blog_comments (id, post_id, user_id, body) VALUES ({p}, {p}, {p}, {p})",
        [cid, post_id, user_id, body],
    )
    if isinstance(blog.comment_ids_by_post, memcache.ReadThrough):
        await blog.comment_ids_by_post.adelete(post_id)
    return cid
