"""The Flask extension: a scope and stats per request, ``run`` in sync views, async views counted."""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from typing import Any

import pytest

import batchy

flask = pytest.importorskip("flask")

from batchy_contrib.web.flask import Batchy, run  # noqa: E402
from batchy_contrib.web.request_stats import current_stats  # noqa: E402

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

    @app.get("/stream")
    def streamed() -> Any:
        run(page([1]))

        def body() -> Iterator[str]:
            # The server reads this after the view returned and the request was torn down.
            stats = current_stats()
            yield f"{stats.name if stats else None}: "
            yield ", ".join(run(page([1, 2])))  # 1 is in the request's cache

        chunks = body() if flask.request.args.get("plain") else flask.stream_with_context(body())
        return flask.Response(chunks)

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
    # The view's task, refused, never runs: dropped, it is reported as never awaited.
    with pytest.warns(RuntimeWarning, match="batchy task page .* was never awaited"):
        with pytest.raises(batchy.UsageError, match="inside async code, 'await' the task"):
            app.test_client().get("/async-run")
        gc.collect()


def test_stats_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="batchy.requests")
    app = make_app()
    app.config["BATCHY_LOG"] = True
    app.test_client().get("/sync")
    assert caplog.messages == [
        "GET /sync: 2 rounds, 2 calls (users_by_id 2)" + caplog.messages[0].partition(")")[2]
    ]


@pytest.mark.parametrize("plain", [True, False], ids=["generator", "stream_with_context"])
def test_a_streamed_body_loads_in_the_request_scope(plain: bool) -> None:
    # Flask tears the request down before the server reads a streamed body: its
    # loads ran outside the request's scope (key 1 loaded again, not counted).
    CALLS.clear()
    response = make_app().test_client().get("/stream", query_string={"plain": "1"} if plain else {})
    assert response.get_data(as_text=True) == "GET /stream: user 1, user 2"
    assert CALLS == [[1], [2]]
    assert current_stats() is None  # nothing of the request is left on the thread


def test_setting_the_extension_up_twice_names_the_fix() -> None:
    # A second Batchy(app) opened a second scope per request and closed only one:
    # the other stayed current on the server's thread after the request, where the
    # thread's next work found the old request's cache.
    app = make_app()
    with pytest.raises(batchy.UsageError) as error:
        Batchy().init_app(app)
    assert str(error.value) == (
        f"Batchy(app): the Flask app {app.name!r} has batchy set up already "
        "(app.extensions['batchy']); set it up once per app, with Batchy(app) or, in an "
        "app factory, Batchy().init_app(app)"
    )
    assert app.test_client().get("/sync").status_code == 200
    assert current_stats() is None


def test_hooks_registered_before_the_extension_run_in_the_request_scope() -> None:
    # An app's (or another extension's) before_request registered before Batchy(app)
    # ran before the scope was opened: the user it loaded was loaded again by the
    # view, and its call was not in g.batchy.
    CALLS.clear()
    app = flask.Flask(__name__)
    seen: list[Any] = []

    @app.before_request
    def load_user() -> None:
        flask.g.user = run(page([1]))

    @app.teardown_request
    def audit(error: BaseException | None) -> None:
        seen.append(current_stats())

    Batchy(app)

    @app.get("/me")
    def me() -> dict[str, Any]:
        return {"me": run(page([1, 2])), "batchy": flask.g.batchy.as_dict()}

    assert app.test_client().get("/me").json == {
        "me": ["user 1", "user 2"],
        "batchy": {"rounds": 2, "calls": {"users_by_id": 2}},
    }
    assert CALLS == [[1], [2]]
    assert seen[0] is not None and seen[0].name == "GET /me"
