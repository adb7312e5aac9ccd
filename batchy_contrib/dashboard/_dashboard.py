"""What every page and action of one dashboard shares: the queue, the guards, the templates.

Pages reach it as ``request.app.state.dashboard``; :meth:`Dashboard.render`
puts the session's CSRF token into every page's forms.
"""

from __future__ import annotations

import time
import urllib.parse
from typing import Any, overload

import jinja2
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

import batchy
from batchy.jobs import ConfigError, Queue

from ._format import FILTERS
from ._security import COOKIE, Tokens

#: What the page says after each action (see _actions), given how many jobs it changed.
NOTICES = {
    "delete": "Deleted {n} job(s).",
    "run_now": "{n} job(s) will run now.",
    "cancel": "Asked the workers to cancel {n} job(s); each stops at its next await.",
    "retry_dead": "Put {n} dead job(s) back on their queues.",
    "delete_dead": "Deleted {n} dead job(s).",
}

__all__ = ["NAV", "NOTICES", "Dashboard", "of", "screened"]

#: The pages in the navigation bar: (path, title).
NAV = (
    ("/", "Overview"),
    ("/jobs", "Jobs"),
    ("/dead", "Dead"),
    ("/scheduled", "Scheduled"),
    ("/workers", "Workers"),
    ("/keys", "Ordered keys"),
    ("/shards", "Sharded runs"),
    ("/batching", "Batching"),
)


class Dashboard:
    """What the pages and actions of one app share: the queue, the guards, the templates."""

    def __init__(
        self, queue: Queue, *, read_only: bool, tokens: Tokens, refresh: float, title: str
    ) -> None:
        self.queue = queue
        self.admin = queue.admin
        self.read_only = read_only
        self.tokens = tokens
        self.refresh = refresh
        self.title = title
        env = jinja2.Environment(
            loader=jinja2.PackageLoader("batchy_contrib.dashboard", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,  # a misspelt name fails the page (and its test)
        )
        env.filters.update(FILTERS)
        self.templates = Jinja2Templates(env=env)

    @staticmethod
    def href(request: Request, path: str, **query: Any) -> str:
        """``path`` under wherever the dashboard is mounted, with ``query`` (empties left out)."""
        root: str = request.scope.get("root_path", "")
        url = root.rstrip("/") + path
        pairs = [(k, v) for k, v in query.items() if v not in (None, "")]
        return url + ("?" + urllib.parse.urlencode(pairs) if pairs else "")

    def render(
        self, request: Request, template: str, context: dict[str, Any], status: int = 200
    ) -> Response:
        """A page, with the session's CSRF token in its forms (and its cookie set when new)."""
        token, cookie = self.tokens.token_for(request)
        # Where actions send the browser back to: this page, without the last notice.
        query = [(k, v) for k, v in request.query_params.multi_items() if k not in ("notice", "n")]
        here = request.url.path + ("?" + urllib.parse.urlencode(query) if query else "")
        notice = NOTICES.get(request.query_params.get("notice", ""))
        count = request.query_params.get("n", "")
        context = {
            "dash": self,
            "csrf": token,
            "now": time.time(),
            "read_only": self.read_only,
            "nav": NAV,
            "store": self.admin.store,
            "here": here,
            "notice": notice.format(n=count) if notice and count.isdigit() else None,
            "href": lambda path, **q: self.href(request, path, **q),
            **context,
        }
        response = self.templates.TemplateResponse(request, template, context, status_code=status)
        if cookie is not None:
            root = request.scope.get("root_path", "").rstrip("/") or "/"
            response.set_cookie(COOKIE, cookie, httponly=True, samesite="strict", path=root)
        return response


def of(request: Request) -> Dashboard:
    """The dashboard serving ``request``."""
    dashboard: Dashboard = request.app.state.dashboard
    return dashboard


@overload
def screened(what: str, text: str) -> str: ...
@overload
def screened(what: str, text: None) -> None: ...
@overload
def screened(what: str, text: str | None) -> str | None: ...


def screened(what: str, text: str | None) -> str | None:
    """``text`` (a job id or a filter from the address or a form), unless no job can match it.

    No store keeps a NUL in an id, a queue name or a key (enqueue refuses them),
    and PostgreSQL refuses one in a query too: it is refused here, on every store
    alike, rather than failing the page on one of them.
    """
    if text is not None and "\x00" in text:
        raise ConfigError(
            f"{what} {batchy.short_repr(text)} holds a NUL character (\\x00), which no job "
            "id, queue name or ordering key holds (enqueue refuses them); take it out of "
            "the address or form"
        )
    return text
