"""Each serving recipe runs as a real server on a free port and answers the feed query batched.

The server counts the SELECTs its database ran (sqlite3's trace callback) and
reports them, with the request's rounds and loader calls, in ``extensions``:
one query per loader per round, 5 in 3 rounds for the feed query.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from blog_db import QUERY

BATCHED = {
    "batchy": {"rounds": 3, "calls": {"users_by_id": 3, "feed_posts": 1, "comments_by_post": 1}},
    "sql": 5,
}


def check_feed(url: str) -> None:
    for _ in range(2):  # a second request is served as the first: nothing leaks between them
        response = httpx.post(url, json={"query": QUERY}, timeout=30)
        assert response.status_code == 200, response.text
        payload: dict[str, Any] = response.json()
        assert "errors" not in payload, payload["errors"]
        assert payload["data"]["viewer"] == {"id": "1", "name": "user 1"}
        assert len(payload["data"]["feed"]) == 10
        assert payload["data"]["feed"][9]["comments"][2] == {
            "id": "30",
            "body": "comment 30",
            "author": {"id": "6", "name": "user 6"},
        }
        assert payload["extensions"] == BATCHED
    small = httpx.post(
        url,
        json={"query": "query F($n: Int!) { feed(first: $n) { id } }", "variables": {"n": 2}},
        timeout=30,
    ).json()
    assert small["data"] == {"feed": [{"id": "1"}, {"id": "2"}]}
    assert small["extensions"]["sql"] == 1


def test_strawberry_asgi(serve: Callable[..., str]) -> None:
    pytest.importorskip("strawberry", reason="strawberry needs graphql-core 3.3")
    check_feed(serve("strawberry_asgi.py"))


def test_strawberry_flask(serve: Callable[..., str]) -> None:
    pytest.importorskip("strawberry", reason="strawberry needs graphql-core 3.3")
    pytest.importorskip("flask")
    check_feed(serve("strawberry_flask.py"))


def test_ariadne_asgi(serve: Callable[..., str]) -> None:
    pytest.importorskip("ariadne")
    pytest.importorskip("uvicorn")
    check_feed(serve("ariadne_asgi.py"))
