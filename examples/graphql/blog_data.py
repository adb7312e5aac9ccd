"""The blog store of the GraphQL examples: users, posts and comments in memory, behind loaders.

10 posts by users 1-4 and 3 comments per post by users 1-12, as in the GraphQL
issue's acceptance case. Every loader counts the rows it returned in ``QUERIES``,
so examples can print how many batch calls a query cost.
"""

from __future__ import annotations

import asyncio
from typing import Any

import batchy

USERS = {i: {"id": i, "name": f"user {i}"} for i in range(1, 13)}
POSTS = [{"id": p, "title": f"post {p}", "author_id": (p - 1) % 4 + 1} for p in range(1, 11)]
COMMENTS = {
    p: [
        {"id": c, "body": f"comment {c}", "author_id": (c - 1) % 12 + 1}
        for c in range(3 * (p - 1) + 1, 3 * p + 1)
    ]
    for p in range(1, 11)
}
VIEWER_ID = 1

QUERIES: list[str] = []  # one entry per batch call, for the examples' printouts


@batchy.batched
async def users_by_id(ids: list[int]) -> list[dict[str, Any] | None]:
    QUERIES.append(f"SELECT * FROM users WHERE id IN {tuple(ids)}")
    await asyncio.sleep(0)  # a database round trip
    return [USERS.get(i) for i in ids]


@batchy.batched
async def feed_posts(firsts: list[int]) -> list[list[dict[str, Any]]]:
    QUERIES.append(f"SELECT * FROM posts ORDER BY id LIMIT {max(firsts)}")
    await asyncio.sleep(0)
    return [POSTS[:n] for n in firsts]


@batchy.batched
async def comments_by_post(post_ids: list[int]) -> list[list[dict[str, Any]]]:
    QUERIES.append(f"SELECT * FROM comments WHERE post_id IN {tuple(post_ids)}")
    await asyncio.sleep(0)
    return [COMMENTS.get(p, []) for p in post_ids]


SDL = """
type Query {
  viewer: User!
  feed(first: Int = 10): [Post!]!
}
type User { id: ID!, name: String! }
type Post { id: ID!, title: String!, author: User!, comments: [Comment!]! }
type Comment { id: ID!, body: String!, author: User! }
"""

QUERY = """
{
  viewer { id name }
  feed(first: 10) {
    id title
    author { id name }
    comments { id body author { id name } }
  }
}
"""
