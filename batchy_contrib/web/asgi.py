"""ASGI middleware: each HTTP request runs in a batchy scope of its own, with its stats at hand.

Pure ASGI, so it works under any ASGI framework (Starlette, FastAPI, Litestar,
strawberry's and ariadne's ASGI apps)::

    from batchy_contrib.web.asgi import BatchyMiddleware

    app = BatchyMiddleware(app)                       # any ASGI app
    app.add_middleware(BatchyMiddleware, log=True)    # Starlette / FastAPI

Inside the request, loader caches live for that request only, and the request's
:class:`~batchy_contrib.web.request_stats.RequestStats` are ``scope["batchy"]``,
``request.state.batchy`` (Starlette, FastAPI) and
:func:`~batchy_contrib.web.request_stats.current_stats`. A sync endpoint (which the
framework runs in a worker thread) runs handlers with
:func:`batchy_contrib.web.request_stats.run`, in the same scope.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import batchy

from .request_stats import NOT_A_HEADER, RequestStats, current_stats, is_header_name, run, track

__all__ = ["BatchyMiddleware", "RequestStats", "current_stats", "run"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BatchyMiddleware:
    """Wrap an ASGI app so that each HTTP (and websocket) connection gets its own batchy scope.

    ``log=True`` logs one line per request to the ``batchy.requests`` logger
    (rounds, calls per loader, time); ``header`` (say ``"x-batchy"``) adds the
    same summary as a response header, for a quick look from ``curl -i``.
    Lifespan events pass through untouched.
    """

    def __init__(self, app: ASGIApp, *, log: bool = False, header: str | None = None) -> None:
        if not callable(app):
            raise batchy.UsageError(
                f"BatchyMiddleware(app) takes an ASGI application, got {batchy.short_repr(app)}; "
                "with Starlette or FastAPI, write app.add_middleware(BatchyMiddleware)"
            )
        if header and not is_header_name(header):  # "" sends none, as None does
            # Taken as it was, it made the server refuse every response of the app.
            raise batchy.UsageError(
                f"BatchyMiddleware(header={header!r}) {NOT_A_HEADER}; e.g. header='X-Batchy'"
            )
        self.app = app
        self.log = log
        self.header = header.lower().encode("ascii") if header else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        name = f"{scope.get('method', 'WS')} {scope.get('path', '')}"
        with track(name, log_stats=self.log) as stats:
            scope["batchy"] = stats
            # Starlette's request.state reads scope["state"]; other frameworks ignore it.
            state = scope.setdefault("state", {})
            if isinstance(state, dict):
                state["batchy"] = stats
            await self.app(scope, receive, self._send_with_header(send, stats))

    def _send_with_header(self, send: Send, stats: RequestStats) -> Send:
        if self.header is None:
            return send
        header = self.header

        async def wrapped(message: MutableMapping[str, Any]) -> None:
            # The body is not sent yet, but the handlers that make it have run:
            # a response starts only once the endpoint has returned it.
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((header, stats.summary().encode("utf-8", "replace")))
                message["headers"] = headers
            await send(message)

        return wrapped
