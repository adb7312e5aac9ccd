"""The recipes' data layer: the blog in in-memory SQLite, three loaders, a query counter.

10 posts by users 1-4, 3 comments per post by users 1-12. Each loader runs one
``SELECT`` per batch call; ``sqlite3``'s trace callback counts every statement
the database runs, so a recipe can report what the server did for a request.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

import batchy

_db = sqlite3.connect(":memory:", check_same_thread=False)  # threaded servers share it
_db.row_factory = sqlite3.Row
_lock = threading.Lock()
_db.executescript(
    """
    CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
    CREATE TABLE posts (id INTEGER PRIMARY KEY, title TEXT NOT NULL, author_id INTEGER NOT NULL);
    CREATE TABLE comments (
        id INTEGER PRIMARY KEY, post_id INTEGER NOT NULL, body TEXT NOT NULL,
        author_id INTEGER NOT NULL
    );
    """
)
_db.executemany("INSERT INTO users VALUES (?, ?)", [(i, f"user {i}") for i in range(1, 13)])
_db.executemany(
    "INSERT INTO posts VALUES (?, ?, ?)", [(p, f"post {p}", (p - 1) % 4 + 1) for p in range(1, 11)]
)
_db.executemany(
    "INSERT INTO comments VALUES (?, ?, ?, ?)",
    [(c, (c - 1) // 3 + 1, f"comment {c}", (c - 1) % 12 + 1) for c in range(1, 31)],
)
_db.commit()

SELECTS = 0  # statements run since start: the server-side query count


def _count(statement: str) -> None:
    global SELECTS
    if statement.lstrip().upper().startswith("SELECT"):
        SELECTS += 1


_db.set_trace_callback(_count)


def _select(sql: str, params: list[Any]) -> list[dict[str, Any]]:
    with _lock:
        return [dict(row) for row in _db.execute(sql, params)]


def _marks(keys: list[Any]) -> str:
    return ", ".join("?" * len(keys))


@batchy.batched
def users_by_id(ids: list[int]) -> dict[int, dict[str, Any]]:
    rows = _select(f"SELECT id, name FROM users WHERE id IN ({_marks(ids)})", ids)
    return {row["id"]: row for row in rows}


@batchy.batched
def feed_posts(firsts: list[int]) -> list[list[dict[str, Any]]]:
    rows = _select("SELECT id, title, author_id FROM posts ORDER BY id LIMIT ?", [max(firsts)])
    return [rows[:n] for n in firsts]


@batchy.batched
def comments_by_post(post_ids: list[int]) -> list[list[dict[str, Any]]]:
    rows = _select(
        f"SELECT id, post_id, body, author_id FROM comments WHERE post_id IN ({_marks(post_ids)})"
        " ORDER BY id",
        post_ids,
    )
    return [[r for r in rows if r["post_id"] == p] for p in post_ids]


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
