"""The dashboard application: :func:`create_app` builds the Starlette app for one queue.

::

    from batchy_contrib.dashboard import create_app

    dashboard = create_app(queue, auth=operators_only)      # an ASGI app
    app.mount("/jobs", dashboard)                           # inside Starlette / FastAPI

It reads and acts through the queue's public management API
(:class:`batchy.jobs.Admin`, ``queue.admin``) and its activity counters
(:class:`batchy.jobs.Activity`), never through a store's internals, so it shows
the memory, SQLite, Redis and PostgreSQL stores alike.
"""

from __future__ import annotations

import os
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from batchy.jobs import ConfigError, JobNotFound, JobStateError, Queue

from . import _actions, _pages
from ._dashboard import Dashboard
from ._security import Auth, AuthGate, Headers, Tokens

__all__ = ["DashboardError", "create_app"]


class DashboardError(ConfigError):
    """:func:`create_app` was given an option it cannot use."""


def create_app(
    queue: Queue,
    *,
    read_only: bool = False,
    auth: Auth | None = None,
    secret_key: str | bytes | None = None,
    refresh: float = 5.0,
    title: str = "batchy",
) -> Starlette:
    """The dashboard of ``queue`` as an ASGI app, to serve alone or mount in another app.

    - ``read_only``: no action is shown, and every action is refused (403).
    - ``auth``: called with each request (a Starlette ``Request``), before
      anything else; it returns whether the request may proceed (a coroutine
      function may too), or raises ``HTTPException`` (a 401 asking for a password).
      Look at ``request.method`` to let some people read but not act.
    - ``secret_key`` signs the CSRF cookie; give every process of one dashboard
      the same (default: ``$BATCHY_DASHBOARD_SECRET``, else random per process).
    - ``refresh``: seconds between live refreshes of a page (0: none).
    """
    if not isinstance(queue, Queue):
        raise DashboardError(
            f"create_app(queue={queue!r}): expected the batchy.jobs.Queue your jobs are "
            "declared on (the one `batchy worker` is given)"
        )
    if auth is not None and not callable(auth):
        raise DashboardError(
            f"create_app(auth={auth!r}): expected a callable taking the request and "
            "returning whether it may proceed, e.g. auth=lambda request: is_operator(request)"
        )
    secret = secret_key if secret_key is not None else os.environ.get("BATCHY_DASHBOARD_SECRET")
    # Named as the operator gave it: `batchy dashboard` users set only the variable.
    given = (
        "create_app(secret_key=...): the key"
        if secret_key is not None
        else "$BATCHY_DASHBOARD_SECRET"
    )
    if secret is None:
        secret = os.urandom(32)
    secret_bytes = secret.encode() if isinstance(secret, str) else secret
    if len(secret_bytes) < 16:
        raise DashboardError(
            f"{given} is {len(secret_bytes)} bytes long; a key that signs CSRF tokens "
            "needs at least 16 (e.g. secrets.token_hex(32))"
        )
    if not isinstance(refresh, (int, float)) or refresh < 0:
        raise DashboardError(
            f"create_app(refresh={refresh!r}): expected seconds between live refreshes "
            "(a number >= 0; 0 turns live refresh off)"
        )
    dashboard = Dashboard(
        queue, read_only=read_only, tokens=Tokens(secret_bytes), refresh=refresh, title=title
    )
    static = StaticFiles(packages=[("batchy_contrib.dashboard", "static")])
    app = _App(
        routes=[*_pages.ROUTES, *_actions.ROUTES, Mount("/static", static, name="static")],
        middleware=[Middleware(AuthGate, auth=auth)] if auth is not None else [],
        exception_handlers={
            JobNotFound: _refused(404),
            JobStateError: _refused(409),
            ConfigError: _refused(400),
            Exception: _failed,
        },
    )
    app.state.dashboard = dashboard
    return app


class _App(Starlette):
    """The dashboard's Starlette app, with :class:`Headers` around everything it sends."""

    def build_middleware_stack(self) -> ASGIApp:
        # Starlette puts its own error middleware (which draws the 500 page, with
        # _failed) outside every middleware it is given: wrap the whole stack, so
        # that page carries the headers too, as do the 404s, 405s and the auth
        # hook's refusals.
        return Headers(super().build_middleware_stack())


async def _failed(request: Request, error: Exception) -> Response:
    """A page for what went wrong (Starlette logs the error after it): the store when
    it cannot be reached, named, with the driver's reason, rather than a bare 500."""
    dashboard: Dashboard = request.app.state.dashboard
    if dashboard.queue.backend.unreachable(error):
        said = " ".join(str(error).split()).rstrip(".")
        if said.startswith(f"cannot reach {dashboard.admin.store}: "):
            # The store's own line (where, why, what to do), said once, not wrapped in ours.
            message = f"{said}; this page reloads as it would"
        else:
            message = (
                f"cannot reach {dashboard.admin.store}: {type(error).__name__}: {said}. Check "
                "that the server is up; this page reloads as it would"
            )
        return dashboard.render(
            request, "error.html", {"title": "Store down", "message": message}, 503
        )
    message = "the dashboard failed on this page; the server's log has the error"
    return dashboard.render(request, "error.html", {"title": "Error", "message": message}, 500)


def _refused(status: int) -> Any:
    async def handle(request: Request, error: Exception) -> Response:
        dashboard: Dashboard = request.app.state.dashboard
        return dashboard.render(
            request, "error.html", {"title": "Not done", "message": str(error)}, status
        )

    return handle
