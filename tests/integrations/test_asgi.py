"""The ASGI middleware, the FastAPI dependency and the request stats, served through httpx."""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import batchy
from batchy_contrib.web.asgi import BatchyMiddleware, current_stats, run
from batchy_contrib.web.fastapi import BatchyStats

CALLS: list[list[int]] = []


@batchy.batched
async def users_by_id(ids: list[int]) -> list[str]:
    CALLS.append(list(ids))
    await asyncio.sleep(0)
    return [f"user {i}" for i in ids]


@batchy.task
def page(ids: list[int]) -> Any:
    return (yield [users_by_id(i) for i in ids])


async def async_page(request: Request) -> JSONResponse:
    first = await page([1, 2, 3])
    again = await page([2, 3, 4])  # 2 and 3 come from the request's cache
    stats = request.state.batchy
    assert current_stats() is stats is request.scope["batchy"]
    assert batchy.current_scope() is stats.scope
    return JSONResponse({"users": first + again, "batchy": stats.as_dict()})


def sync_page(request: Request) -> JSONResponse:  # Starlette runs it in a worker thread
    users = run(page([5, 6]))
    return JSONResponse({"users": users, "batchy": request.state.batchy.as_dict()})


def make_app(**options: Any) -> Any:
    routes = [Route("/async", async_page), Route("/sync", sync_page)]
    return BatchyMiddleware(Starlette(routes=routes), **options)


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


async def test_each_request_gets_its_own_scope_and_stats() -> None:
    CALLS.clear()
    async with client(make_app()) as http:
        first = (await http.get("/async")).json()
        second = (await http.get("/async")).json()
    assert first["users"] == [f"user {i}" for i in (1, 2, 3, 2, 3, 4)]
    assert first["batchy"] == {"rounds": 2, "calls": {"users_by_id": 2}}
    assert second == first  # a new scope: nothing cached from the first request
    assert CALLS == [[1, 2, 3], [4], [1, 2, 3], [4]]


async def test_sync_endpoints_run_handlers_in_the_request_scope() -> None:
    CALLS.clear()
    async with client(make_app()) as http:
        body = (await http.get("/sync")).json()
    assert body == {
        "users": ["user 5", "user 6"],
        "batchy": {"rounds": 1, "calls": {"users_by_id": 1}},
    }


async def test_stats_are_logged_and_sent_as_a_header(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="batchy.requests")
    async with client(make_app(log=True, header="X-Batchy")) as http:
        response = await http.get("/async")
    summary = "GET /async: 2 rounds, 2 calls (users_by_id 2)"
    assert response.headers["x-batchy"].startswith(summary)
    assert caplog.messages[0].startswith(summary)


async def test_concurrent_requests_say_they_overlapped() -> None:
    async with client(make_app()) as http:
        bodies = [r.json() for r in await asyncio.gather(*(http.get("/async") for _ in range(3)))]
    assert all(b["batchy"]["overlapped"] >= 1 for b in bodies)


async def test_lifespan_passes_through() -> None:
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])
        assert "batchy" not in scope

    await BatchyMiddleware(app)({"type": "lifespan"}, None, None)  # type: ignore[arg-type]
    assert seen == ["lifespan"]


def test_middleware_needs_an_app() -> None:
    with pytest.raises(batchy.UsageError, match=r"write app.add_middleware\(BatchyMiddleware\)"):
        BatchyMiddleware("app")  # type: ignore[arg-type]


def test_run_outside_a_request_is_batchy_run() -> None:
    assert run(page([7])) == ["user 7"]


async def test_run_in_async_code_names_the_fix() -> None:
    # The task, refused, never runs: dropped, it is reported as never awaited.
    with pytest.warns(RuntimeWarning, match="batchy task page .* was never awaited"):
        with pytest.raises(batchy.UsageError, match="inside async code, 'await' the task"):
            run(page([7]))
        gc.collect()


async def test_fastapi_dependency() -> None:
    app = FastAPI()

    @app.get("/users")
    async def users(stats: BatchyStats) -> dict[str, Any]:
        listed = await page([1, 2])
        again = await page([2, 3])
        assert batchy.current_scope() is stats.scope
        return {"users": listed + again, "batchy": stats.as_dict()}

    @app.get("/sync")
    def sync_users(stats: BatchyStats) -> dict[str, Any]:
        return {"users": run(page([1, 2])), "batchy": stats.as_dict()}

    async with client(app) as http:
        body = (await http.get("/users")).json()
        assert body["batchy"] == {"rounds": 2, "calls": {"users_by_id": 2}}
        assert (await http.get("/users")).json() == body  # one scope per request
        body = (await http.get("/sync")).json()
        assert body == {
            "users": ["user 1", "user 2"],
            "batchy": {"rounds": 1, "calls": {"users_by_id": 1}},
        }

    # Behind the middleware, the dependency hands out the middleware's stats.
    async with client(BatchyMiddleware(app, header="x-batchy")) as http:
        response = await http.get("/users")
    assert response.json()["batchy"]["rounds"] == 2
    assert response.headers["x-batchy"].startswith("GET /users: 2 rounds")


async def test_a_path_with_line_breaks_stays_on_one_header_and_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The summary carries the request's path, which the server has percent-decoded:
    # GET /async%0D%0ASet-Cookie:... put a line break into the X-Batchy header (an
    # HTTP server refuses to send it, so the request got no response at all) and a
    # forged line into the log.
    caplog.set_level(logging.INFO, logger="batchy.requests")
    async with client(make_app(log=True, header="X-Batchy")) as http:
        response = await http.get("/async%0D%0ASet-Cookie:%20session=stolen%00")
    summary = "GET /async\\r\\nSet-Cookie: session=stolen\\x00: 0 rounds, 0 calls"
    assert response.status_code == 404
    assert response.headers["x-batchy"].startswith(summary)
    assert "set-cookie" not in response.headers
    assert caplog.messages[0].startswith(summary)


@pytest.mark.parametrize("name", ["X Batchy", "X-Bätchy", "X-Batchy:", "X-Batchy\r\n"])
def test_a_header_that_is_no_header_name_is_refused_when_set_up(name: str) -> None:
    # It was taken, and then uvicorn refused to send any response of the app.
    with pytest.raises(batchy.UsageError) as error:
        BatchyMiddleware(make_app(), header=name)
    assert str(error.value) == (
        f"BatchyMiddleware(header={name!r}) is not an HTTP header name (ASCII letters, "
        "digits and !#$%&'*+-.^_`|~, no spaces or colons); e.g. header='X-Batchy'"
    )
