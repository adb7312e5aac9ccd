"""A FastAPI dependency that runs the endpoint in a batchy scope of its own and gives it the stats.

::

    from batchy_contrib.web.fastapi import BatchyStats

    @app.get("/posts/{pid}")
    async def post_page(pid: int, stats: BatchyStats) -> dict[str, Any]:
        page = await post_view(pid)          # loader caches live for this request
        return {"page": page, "batchy": stats.as_dict()}

Use it for a few routes; for all of them, add
:class:`batchy_contrib.web.asgi.BatchyMiddleware` instead (the dependency then hands
out the middleware's stats). Sync (``def``) endpoints run in a worker thread:
run handlers there with :func:`batchy_contrib.web.request_stats.run`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from .._extras import extra

with extra(__name__, "'batchy[fastapi]'", "fastapi"):
    from fastapi import Depends, Request

from .request_stats import RequestStats, run, track

__all__ = ["BatchyStats", "RequestStats", "batchy_scope", "run"]


async def batchy_scope(request: Request) -> AsyncIterator[RequestStats]:
    """The dependency: a new scope and stats for the request, or the middleware's if it has one."""
    existing: Any = request.scope.get("batchy")
    if isinstance(existing, RequestStats):
        yield existing
        return
    # FastAPI enters and leaves a generator dependency in the request's own
    # task, so the scope is current in the endpoint and is left where it was
    # entered.
    with track(f"{request.method} {request.url.path}") as stats:
        request.scope["batchy"] = stats
        request.state.batchy = stats
        yield stats


#: ``stats: BatchyStats`` in an endpoint's signature: the request's scope and stats.
BatchyStats = Annotated[RequestStats, Depends(batchy_scope)]
