"""The Django integration in a real project, over real HTTP: WSGI and ASGI, SQLite and PostgreSQL.

``examples/integrations/django_blog`` serves the feed from a sync view
(``batchy_contrib.web.django.run``) and an async view (``await``), through
``BatchyMiddleware``; the server counts its SELECTs in ``X-SQL-Selects``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

pytest.importorskip("django")

HERE = Path(__file__).resolve().parent


def postgres_up() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=1).close()
    except OSError:
        if os.environ.get("CI") == "true":
            raise
        return False
    return True


@pytest.mark.parametrize("server", ["wsgi", "asgi"])
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_feed_views_batch(serve: Callable[..., str], tmp_path: Path, db: str, server: str) -> None:
    if db == "postgres" and not postgres_up():
        pytest.skip("PostgreSQL is not running at 127.0.0.1:5432")
    if server == "asgi":
        pytest.importorskip("uvicorn")
    env = {**os.environ, "BLOG_SQLITE": str(tmp_path / "blog.db")}
    args = ["--db", db, *(["--asgi"] if server == "asgi" else [])]
    base = serve("django_blog/serve.py", *args, env=env).removesuffix("/graphql")
    for view in ("feed", "feed-async", "feed"):
        response = httpx.get(f"{base}/{view}?first=10", timeout=30)
        assert response.status_code == 200, response.text
        body = response.json()
        assert [p["title"] for p in body["feed"]] == [f"post {p}" for p in range(1, 11)]
        assert body["feed"][9]["comments"][2] == {"body": "comment 30", "author": "user 6"}
        # posts, then authors and comments, then commenters: 4 queries in 3 rounds
        assert body["batchy"] == {
            "rounds": 3,
            "calls": {"blog.Post.pk": 1, "blog.Author.pk": 2, "blog.Comment.post": 1},
        }
        assert response.headers["x-sql-selects"] == "4"
        assert response.headers["x-batchy"].startswith(f"GET /{view}: 3 rounds, 4 calls")


def test_run_misuse_and_settings_errors() -> None:
    out = subprocess.run(
        [sys.executable, str(HERE / "django_checks.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
