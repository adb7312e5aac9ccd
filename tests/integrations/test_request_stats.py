"""Request stats are the request's scope's: exact for concurrent requests on one event loop."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import batchy
from batchy_contrib.web.asgi import BatchyMiddleware
from batchy_contrib.web.request_stats import track

CALLS: list[list[int]] = []


@batchy.batched
async def users(ids: list[int]) -> list[str]:
    CALLS.append(list(ids))
    await asyncio.sleep(0)
    return [f"user {i}" for i in ids]


def body(request: Request) -> dict[str, Any]:
    stats = request.state.batchy
    return {**stats.as_dict(), "keys": stats.keys, "overlapped": stats.overlapped}


async def test_concurrent_requests_count_only_their_own_rounds_and_calls() -> None:
    done = asyncio.Event()

    async def short(request: Request) -> JSONResponse:
        await users(1)
        await done.wait()  # stays open while the other request goes through two more rounds
        return JSONResponse(body(request))

    async def long(request: Request) -> JSONResponse:
        for uid in (11, 12, 13):
            await users(uid)
        done.set()
        return JSONResponse(body(request))

    app = BatchyMiddleware(Starlette(routes=[Route("/short", short), Route("/long", long)]))
    CALLS.clear()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        first, second = await asyncio.gather(http.get("/short"), http.get("/long"))
    assert CALLS == [[1, 11], [12], [13]]  # round 1 shared by both requests
    assert first.json() == {
        "rounds": 1,
        "calls": {"users": 1},
        "keys": {"users": 1},
        "overlapped": 1,
    }
    assert second.json() == {
        "rounds": 3,
        "calls": {"users": 3},
        "keys": {"users": 3},
        "overlapped": 1,
    }


def test_a_requests_runs_in_other_threads_count_in_it() -> None:
    # A sync view runs handlers on an event loop of its own, here in another thread.
    with track("GET /report") as stats:

        def in_thread() -> Any:
            return batchy.run(users.many([1, 2]), scope=stats.scope)

        async def main() -> Any:
            return await asyncio.to_thread(in_thread)

        assert asyncio.run(main()) == ["user 1", "user 2"]
    assert (stats.rounds, stats.calls, stats.errors) == (1, {"users": 1}, 0)
    assert stats.summary().startswith("GET /report: 1 rounds, 1 calls (users 1) in ")
