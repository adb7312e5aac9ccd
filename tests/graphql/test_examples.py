"""The GraphQL examples run and batch: strawberry, graphene, ariadne, and a real HTTP server.

Each framework test runs where its framework installs: strawberry needs
graphql-core 3.3 (the main venv), graphene needs 3.2 (`make test-graphql32`),
ariadne runs on both.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from blog_data import QUERY, comments_by_post, feed_posts, users_by_id

from batchy.testing import record

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "graphql"


def check_batched(rec: Any) -> None:
    assert rec.rounds == 3, rec.report()
    assert len(rec.calls(users_by_id)) == 3
    assert len(rec.calls(feed_posts)) == 1
    assert len(rec.calls(comments_by_post)) == 1


async def test_strawberry() -> None:
    pytest.importorskip("strawberry", reason="strawberry needs graphql-core 3.3")
    import strawberry_app

    with record() as rec:
        result = await strawberry_app.schema.execute(QUERY)
    assert result.errors is None
    assert len(result.data["feed"]) == 10  # type: ignore[index]
    assert result.data["feed"][0]["comments"][0]["author"] == {"id": "1", "name": "user 1"}  # type: ignore[index]
    check_batched(rec)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_graphene(mode: str) -> None:
    pytest.importorskip("graphene", reason="graphene 3 needs graphql-core 3.2")
    import graphene_app

    with record() as rec:
        result = (
            graphene_app.run_sync() if mode == "sync" else asyncio.run(graphene_app.run_async())
        )
    assert result.errors is None
    assert result.data["viewer"] == {"id": "1", "name": "user 1"}
    check_batched(rec)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_ariadne(mode: str) -> None:
    pytest.importorskip("ariadne")
    import ariadne_app

    with record() as rec:
        result = ariadne_app.run_sync() if mode == "sync" else asyncio.run(ariadne_app.run_async())
    assert "errors" not in result
    assert result["data"]["feed"][9]["author"] == {"id": "2", "name": "user 2"}
    check_batched(rec)


@pytest.mark.parametrize("name", ["strawberry_app", "graphene_app", "ariadne_app"])
def test_example_scripts_run(name: str) -> None:
    pytest.importorskip(name.removesuffix("_app"))
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py")],
        cwd=EXAMPLES,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "5 batch calls" in out


def test_http_server_answers_a_posted_query() -> None:
    server = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "http_server.py"), "--port", "0"],
        cwd=EXAMPLES,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # "listening on http://127.0.0.1:PORT/graphql"
        assert line.startswith("listening on "), line
        url = line.split()[-1]

        def post(body: bytes) -> tuple[int, dict[str, Any]]:
            request = urllib.request.Request(
                url, data=body, headers={"Content-Type": "application/json"}, method="POST"
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return response.status, json.loads(response.read())
            except urllib.error.HTTPError as error:
                return error.code, json.loads(error.read())

        status, payload = post(json.dumps({"query": QUERY}).encode())
        assert status == 200
        assert "errors" not in payload
        assert len(payload["data"]["feed"]) == 10
        assert payload["data"]["viewer"] == {"id": "1", "name": "user 1"}
        assert payload["extensions"]["batchy"] == {
            "rounds": 3,
            "calls": {"users_by_id": 3, "feed_posts": 1, "comments_by_post": 1},
        }

        status, payload = post(
            json.dumps(
                {"query": "query F($n: Int) { feed(first: $n) { id } }", "variables": {"n": 2}}
            ).encode()
        )
        assert (status, payload["data"]) == (200, {"feed": [{"id": "1"}, {"id": "2"}]})

        status, payload = post(b"not json")
        assert status == 400
        assert "the body must be JSON" in payload["errors"][0]["message"]
    finally:
        server.terminate()
        server.wait(timeout=10)
        if server.stdout is not None:
            server.stdout.close()
