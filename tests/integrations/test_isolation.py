"""Concurrent requests never see each other's cached values (ASGI and Flask), whatever they load.

Each request primes some keys with a value of its own and loads others: a
request that got another's primed value, or a loader asked for a key that every
request asking for it had primed, is a scope leaking between requests.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import batchy
from batchy_contrib.web.asgi import BatchyMiddleware, run

flask = pytest.importorskip("flask")

from batchy_contrib.web.flask import Batchy  # noqa: E402
from batchy_contrib.web.flask import run as flask_run  # noqa: E402

CALLS: list[list[int]] = []


@batchy.batched(name="values")
async def values(keys: list[int]) -> list[str]:
    CALLS.append(list(keys))
    await asyncio.sleep(0)
    return [f"v{k}" for k in keys]


async def serve(n: int, keys: list[int], primed: list[int]) -> list[str]:
    """What one request does: prime its keys with its own values, then load, one at a time."""
    for key in primed:
        values.prime(key, f"request {n}: {key}")
    out = []
    for key in keys:
        out.append(await values(key))
        await asyncio.sleep(0)  # let the other requests run between the loads
    return out


def query(n: int, keys: list[int], primed: list[int]) -> dict[str, Any]:
    """What request ``n`` asks for, as its query string's parameters."""
    return {"n": n, "keys": json.dumps(keys), "primed": json.dumps(primed)}


def asked(q: Mapping[str, str]) -> tuple[int, list[int], list[int]]:
    return int(q["n"]), json.loads(q["keys"]), json.loads(q["primed"])


async def async_endpoint(request: Request) -> Response:
    out = await serve(*asked(request.query_params))
    return JSONResponse({"out": out, "keys": request.state.batchy.keys})


def sync_endpoint(request: Request) -> Response:  # run by Starlette in a worker thread
    out = run(serve(*asked(request.query_params)))
    return JSONResponse({"out": out, "keys": request.state.batchy.keys})


async def streamed_endpoint(request: Request) -> Response:
    n, keys, primed = asked(request.query_params)
    for key in primed:  # in the endpoint; loaded in the body, after it returned
        values.prime(key, f"request {n}: {key}")

    async def body() -> Any:
        yield json.dumps({"out": await serve(n, keys, [])})

    return StreamingResponse(body())


ASGI = BatchyMiddleware(
    Starlette(
        routes=[
            Route("/async", async_endpoint),
            Route("/sync", sync_endpoint),
            Route("/streamed", streamed_endpoint),
        ]
    )
)

requests = st.lists(
    st.tuples(
        st.sampled_from(["async", "sync", "streamed"]),
        st.lists(st.integers(0, 9), min_size=1, max_size=6),  # loaded
        st.lists(st.integers(0, 9), max_size=3),  # primed
    ),
    min_size=2,
    max_size=8,
)


Plan = list[tuple[str, list[int], list[int]]]


def check(plan: Plan, bodies: list[Any]) -> None:
    """Each request got its own values, counted its own keys, and the loader was asked
    for each key some request loaded without priming it, once per call."""
    for n, ((kind, keys, primed), body) in enumerate(zip(plan, bodies, strict=True)):
        assert body["out"] == [f"request {n}: {k}" if k in primed else f"v{k}" for k in keys]
        loaded = len(set(keys) - set(primed))
        if kind != "streamed":  # the body's JSON was written before the body loaded
            assert body["keys"] == ({"values": loaded} if loaded else {}), (kind, n)
    wanted = set().union(*(set(keys) - set(primed) for _, keys, primed in plan))
    assert {key for call in CALLS for key in call} == wanted
    assert all(len(call) == len(set(call)) for call in CALLS)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests)
def test_concurrent_asgi_requests_see_only_their_own_values(plan: Plan) -> None:
    CALLS.clear()

    async def main() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=ASGI)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            asks = [
                http.get(f"/{kind}", params=query(n, *ask)) for n, (kind, *ask) in enumerate(plan)
            ]
            return await asyncio.gather(*asks)

    check(plan, [answer.json() for answer in asyncio.run(main())])


def make_flask() -> Any:
    app = flask.Flask(__name__)
    Batchy(app)

    @app.get("/sync")
    def sync_view() -> Any:
        out = flask_run(serve(*asked(flask.request.args)))
        return {"out": out, "keys": flask.g.batchy.keys}

    return app


FLASK = make_flask()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests)
def test_concurrent_flask_requests_on_reused_threads_see_only_their_own_values(plan: Plan) -> None:
    # A thread pool serves them, as waitress or gunicorn's threads do: a thread
    # serves one request after another, in the same context.
    CALLS.clear()
    plan = [("sync", keys, primed) for _, keys, primed in plan]

    def get(n: int, keys: list[int], primed: list[int]) -> Any:
        return FLASK.test_client().get("/sync", query_string=query(n, keys, primed)).json

    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(get, n, keys, primed) for n, (_, keys, primed) in enumerate(plan)]
        check(plan, [future.result() for future in futures])
