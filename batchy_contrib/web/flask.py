"""Flask extension: a batchy scope per request, and ``run`` for handlers in sync views.

::

    from flask import Flask, g
    from batchy_contrib.web.flask import Batchy, run

    app = Flask(__name__)
    Batchy(app)                                  # or Batchy().init_app(app)

    @app.get("/posts/<int:pid>")
    def post_page(pid):                          # a sync view: no event loop here
        page = run(post_view(pid))               # batched, cached for this request
        return {"page": page, "batchy": g.batchy.as_dict()}

Configuration: ``BATCHY_LOG = True`` logs one line per request (rounds, calls
per loader, time) to the ``batchy.requests`` logger. The request's
:class:`~batchy_contrib.web.request_stats.RequestStats` are ``g.batchy``.

``run`` runs an event loop of its own for the duration of the call, in the
request's scope; sync GraphQL execution (strawberry's ``GraphQLView`` with
:data:`batchy_contrib.graphql.strawberry.execution_context_class`, ``graphql_sync``)
does the same by itself. ``async def`` views, which Flask runs through asgiref
on a loop in another thread, are counted in the request's stats too, and so is
a streamed body, which the server reads after the view returned.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from .._extras import extra

with extra(__name__, "'batchy[flask]'", "flask"):
    from flask import Flask, Response, g, request

import batchy

from .request_stats import RequestStats, Served, counted_here, current_stats, run, track

__all__ = ["Batchy", "RequestStats", "run"]


class Batchy:
    """The extension; ``Batchy(app)`` or ``Batchy().init_app(app)`` for an app factory."""

    def __init__(self, app: Flask | None = None) -> None:
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Open a scope before each request and close it when the request is torn down."""
        if "batchy" in app.extensions:
            # Twice would open two scopes per request and close one: the other
            # would stay current on the server's thread after the request.
            raise batchy.UsageError(
                f"Batchy(app): the Flask app {app.name!r} has batchy set up already "
                "(app.extensions['batchy']); set it up once per app, with Batchy(app) or, "
                "in an app factory, Batchy().init_app(app)"
            )
        app.config.setdefault("BATCHY_LOG", False)
        app.extensions["batchy"] = self
        # First to open and last to close (Flask runs teardowns in reverse), so
        # hooks registered before this one (the app's, another extension's: the
        # one that loads the signed-in user) run in the request's scope too.
        app.before_request_funcs.setdefault(None, []).insert(0, self._open)
        app.after_request(self._stream)
        app.teardown_request_funcs.setdefault(None, []).insert(0, self._close)
        # Flask runs `async def` views on a loop in another thread: count there too.
        to_sync = app.async_to_sync

        def async_to_sync(func: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
            async def counted(*args: Any, **kwargs: Any) -> Any:
                stats = current_stats()
                with counted_here(stats) if stats is not None else contextlib.nullcontext():
                    return await func(*args, **kwargs)

            return to_sync(counted)

        app.async_to_sync = async_to_sync  # type: ignore[method-assign]

    def _open(self) -> None:
        from flask import current_app

        stack = contextlib.ExitStack()
        name = f"{request.method} {request.path}"
        g.batchy = stack.enter_context(track(name, log_stats=current_app.config["BATCHY_LOG"]))
        g._batchy_exit = stack

    def _stream(self, response: Response) -> Response:
        # Flask tears the request down before the server reads a streamed body
        # (stream_with_context too: it pushes the request again, but opens no
        # scope): each chunk is read back in the request's scope. A file sent
        # as it is (send_file) loads nothing, and stays the server's to send.
        stats: RequestStats | None = g.get("batchy")
        if stats is not None and response.is_streamed and not response.direct_passthrough:
            chunks: Iterable[Any] = response.response  # str or bytes: encoded after
            response.response = Served(chunks, stats)
        return response

    def _close(self, error: BaseException | None) -> None:
        stack: contextlib.ExitStack | None = g.pop("_batchy_exit", None)
        if stack is not None:
            stack.close()
