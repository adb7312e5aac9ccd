"""The ASGI middleware under Litestar, served by uvicorn and queried over real HTTP.

The app is built here and served from a thread of the test process, on a free
port, so the test can assert on the batches the loader received as well as on
what each response says.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

litestar = pytest.importorskip("litestar")
uvicorn = pytest.importorskip("uvicorn")

from litestar import Litestar, Request, Response, get  # noqa: E402
from litestar.middleware import DefineMiddleware  # noqa: E402

import batchy  # noqa: E402
from batchy_contrib.web.asgi import BatchyMiddleware, current_stats, run  # noqa: E402

CALLS: list[list[int]] = []


@batchy.batched
async def users_by_id(ids: list[int]) -> list[str]:
    CALLS.append(list(ids))
    await asyncio.sleep(0)
    return [f"user {i}" for i in ids]


@batchy.task
def page(ids: list[int]) -> Any:
    return (yield [users_by_id(i) for i in ids])


async def users_page(request: Request[Any, Any, Any]) -> dict[str, Any]:
    first = await page([1, 2, 3])
    again = await page([2, 3, 4])  # 2 and 3 come from the request's cache
    stats = request.state.batchy
    return {
        "users": first + again,
        "batchy": stats.as_dict(),
        "one scope": current_stats() is stats is request.scope["batchy"]  # type: ignore[typeddict-item]
        and batchy.current_scope() is stats.scope,
    }


@get("/async")
async def async_page(request: Request[Any, Any, Any]) -> dict[str, Any]:
    return await users_page(request)


#: The requests to /together wait for each other here (a test sets it).
together_barrier = asyncio.Barrier(1)


@get("/together")
async def together(request: Request[Any, Any, Any]) -> dict[str, Any]:
    await together_barrier.wait()  # so that all of them are in flight at once
    return await users_page(request)


@get("/sync", sync_to_thread=True)  # Litestar runs it in a worker thread
def sync_page(request: Request[Any, Any, Any]) -> dict[str, Any]:
    users = run(page([5, 6]))
    again = run(page([6, 7]))  # a second run in the same request shares its cache
    stats = request.state.batchy
    return {
        "users": users + again,
        "batchy": stats.as_dict(),
        "worker thread": threading.get_ident() != stats.thread,
    }


@get("/on-the-loop", sync_to_thread=False)  # a sync handler Litestar runs on the event loop
def on_the_loop() -> dict[str, Any]:
    return {"users": run(page([8]))}


def make_app(*middleware: Any) -> Litestar:
    return Litestar(
        [async_page, together, sync_page, on_the_loop],
        middleware=list(middleware) or [BatchyMiddleware],
        logging_config=None,
    )


@contextmanager
def served(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn from a thread, on a free port; yield its base URL."""
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:  # waiting for start-up, not timing anything
        if not thread.is_alive() or time.monotonic() > deadline:
            raise AssertionError("uvicorn did not start the Litestar app")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def test_each_request_gets_its_own_scope_and_stats() -> None:
    CALLS.clear()
    with served(make_app()) as base:
        first = httpx.get(f"{base}/async", timeout=30).json()
        second = httpx.get(f"{base}/async", timeout=30).json()
    assert first == {
        "users": [f"user {i}" for i in (1, 2, 3, 2, 3, 4)],
        "batchy": {"rounds": 2, "calls": {"users_by_id": 2}},
        "one scope": True,
    }
    assert second == first  # a new scope: nothing cached from the first request
    assert CALLS == [[1, 2, 3], [4], [1, 2, 3], [4]]


def test_sync_handlers_run_in_the_request_scope_from_a_worker_thread() -> None:
    CALLS.clear()
    with served(make_app()) as base:
        body = httpx.get(f"{base}/sync", timeout=30).json()
    assert body == {
        "users": ["user 5", "user 6", "user 6", "user 7"],
        "batchy": {"rounds": 2, "calls": {"users_by_id": 2}},
        "worker thread": True,
    }
    assert CALLS == [[5, 6], [7]]


def test_concurrent_requests_share_a_round_and_say_so() -> None:
    global together_barrier
    CALLS.clear()
    together_barrier = asyncio.Barrier(4)

    async def fetch_all(base: str) -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            responses = await asyncio.gather(*(http.get("/together") for _ in range(4)))
        return [r.json() for r in responses]

    with served(make_app()) as base:
        bodies = asyncio.run(fetch_all(base))
    for body in bodies:
        assert body == {
            "users": [f"user {i}" for i in (1, 2, 3, 2, 3, 4)],
            "batchy": {"rounds": 2, "calls": {"users_by_id": 2}, "overlapped": 3},
            "one scope": True,
        }
    # Keys that requests in flight on one loop ask for in the same round share
    # one call: four requests, still one call per round.
    assert CALLS == [[1, 2, 3], [4]]


def test_stats_are_logged_and_sent_as_a_header(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="batchy.requests")
    app = make_app(DefineMiddleware(BatchyMiddleware, log=True, header="X-Batchy"))
    with served(app) as base:
        response = httpx.get(f"{base}/async", timeout=30)
    summary = "GET /async: 2 rounds, 2 calls (users_by_id 2)"
    assert response.headers["x-batchy"].startswith(summary)
    assert [m for m in caplog.messages if m.startswith(summary)]


def test_the_whole_app_wrapped_works_too() -> None:
    CALLS.clear()
    app = BatchyMiddleware(Litestar([async_page], logging_config=None), header="x-batchy")
    with served(app) as base:
        response = httpx.get(f"{base}/async", timeout=30)
    assert response.json()["batchy"] == {"rounds": 2, "calls": {"users_by_id": 2}}
    assert response.headers["x-batchy"].startswith("GET /async: 2 rounds")
    assert CALLS == [[1, 2, 3], [4]]


def test_run_on_the_event_loop_names_the_fix() -> None:
    errors: list[BaseException] = []

    def capture(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
        errors.append(exc)
        return Response({"error": str(exc)}, status_code=500)

    app = Litestar(
        [on_the_loop],
        middleware=[BatchyMiddleware],
        exception_handlers={batchy.UsageError: capture},
        logging_config=None,
    )
    with served(app) as base:
        response = httpx.get(f"{base}/on-the-loop", timeout=30)
    assert response.status_code == 500
    [error] = errors
    assert isinstance(error, batchy.UsageError)
    assert "inside async code, 'await' the task" in str(error)
    assert "There is no current event loop" not in response.text
