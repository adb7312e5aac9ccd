"""The graphene-django recipe over real HTTP (graphene needs graphql-core 3.2: make test-graphql32)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Found, not imported: graphene_django reads Django's settings when imported.
if importlib.util.find_spec("graphene_django") is None:
    pytest.skip("graphene-django needs graphql-core 3.2", allow_module_level=True)
httpx = pytest.importorskip("httpx")

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "integrations" / "django_blog"
QUERY = """
{
  viewer { id name }
  feed(first: 10) { id title author { id name } comments { id body author { id name } } }
}
"""


def test_graphene_django_batches_over_http(tmp_path: Path) -> None:
    env = {**os.environ, "BLOG_SQLITE": str(tmp_path / "blog.db")}
    server = subprocess.Popen(
        [sys.executable, str(RECIPE / "serve.py"), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("listening on "), line
        url = line.split()[-1]
        for _ in range(2):
            response = httpx.post(url, json={"query": QUERY}, timeout=30)
            assert response.status_code == 200, response.text
            payload = response.json()
            assert "errors" not in payload, payload["errors"]
            assert payload["data"]["viewer"] == {"id": "1", "name": "user 1"}
            assert payload["data"]["feed"][9]["comments"][2] == {
                "id": "30",
                "body": "comment 30",
                "author": {"id": "6", "name": "user 6"},
            }
            # viewer and posts; post authors and comments; commenters: 5 queries, 3 rounds
            assert response.headers["x-sql-selects"] == "5"
            assert response.headers["x-batchy"].startswith(
                "POST /graphql: 3 rounds, 5 calls (blog.Author.pk 3, blog.Post.pk 1, "
                "blog.Comment.post 1)"
            )
    finally:
        server.terminate()
        server.wait(timeout=10)
        if server.stdout is not None:
            server.stdout.close()
