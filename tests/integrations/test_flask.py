"""The Flask extension: a scope and stats per request, ``run`` in sync views, async views counted."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import batchy

flask = pytest.importorskip("flask")

from batchy_contrib.web.flask import Batchy, run  # noqa: E402

CALLS: list[list[int]] = []


@batchy.batched
def users_by_id(ids: list[int]) -> list[str]:
    CALLS.append(list(ids))
    return [f"user {i}" for i in ids]


@batchy.task
def page(ids: list[int]) -> Any:
    return (yield [users_by_id(i) for i in ids])


def make_app() -> Any:
    app = flask.Flask(__name__)
    Batchy(app)

    @app.get("/sync")
    def sync_view() -> dict[str, Any]:
        first = run(page([1, 2]))
        again = run(page([2, 3]))  # a second loop, the same request scope: 2 is cached
        return {"users": first + again, "batchy": flask.g.batchy.as_dict()}

    @app.get("/async")
    async def async_view() -> dict[str, Any]:
        users = await page([4, 5])
        return {"users": users, "batchy": flask.g.batchy.as_dict()}

    @app.get("/async-run")
    async def async_run() -> dict[str, Any]:
        return {"users": run(page([1]))}

    return app


def test_sync_views_share_the_request_scope_across_runs() -> None:
    CALLS.clear()
    http = make_app().test_client()
    body = http.get("/sync").json
    assert body == {
        "users": ["user 1", "user 2", "user 2", "user 3"],
        "batchy": {"rounds": 2, "calls": {"users_by_id": 2}},
    }
    assert http.get("/sync").json == body  # a new request, a new scope
    assert CALLS == [[1, 2], [3], [1, 2], [3]]


def test_async_views_are_counted() -> None:
    pytest.importorskip("asgiref", reason="Flask runs async views with asgiref")
    body = make_app().test_client().get("/async").json
    assert body == {
        "users": ["user 4", "user 5"],
        "batchy": {"rounds": 1, "calls": {"users_by_id": 1}},
    }


def test_run_in_an_async_view_names_the_fix() -> None:
    pytest.importorskip("asgiref")
    app = make_app()
    app.testing = True
    with pytest.raises(batchy.UsageError, match="inside async code, 'await' the task"):
        app.test_client().get("/async-run")


def test_stats_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="batchy.requests")
    app = make_app()
    app.config["BATCHY_LOG"] = True
    app.test_client().get("/sync")
    assert caplog.messages == [
        "GET /sync: 2 rounds, 2 calls (users_by_id 2)" + caplog.messages[0].partition(")")[2]
    ]
