"""The dashboard's guards: the authentication hook before every request, and CSRF tokens on actions.

- ``auth(request)`` runs before anything else, for every request (pages, static
  files, actions): a falsy answer is a 403, and an ``HTTPException`` it raises
  (a 401 asking for a password) is sent as it is. So when it is configured,
  nothing is reachable without it.
- Every action is a POST carrying a CSRF token: a random token per browser
  session, kept in an HttpOnly, SameSite=Strict cookie signed with HMAC-SHA256
  under the dashboard's secret, and repeated in each form. Another site can make
  a browser send the cookie, but cannot read it to copy the token into a form,
  nor forge a cookie without the secret.
- A dashboard that answers anyone on this machine (``batchy dashboard`` on a
  loopback address, without ``--auth``) answers only requests addressed to a
  name of this machine (the ``Host`` header): a page of another site whose name
  was pointed at 127.0.0.1 (DNS rebinding) is, to the browser, of the same
  origin, and could otherwise read every page and take their CSRF tokens.
- Every response carries headers that keep the pages out of other sites' frames
  (clickjacking: a framed page's buttons clicked through a decoy), allow only the
  dashboard's own script, and stop browsers from sniffing a type into HTML.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "COOKIE",
    "HEADERS",
    "LOCAL_NAMES",
    "Auth",
    "AuthGate",
    "HostGuard",
    "Headers",
    "Tokens",
    "safe_next",
]

#: The names a browser on this machine reaches a loopback dashboard by.
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")

#: The cookie that holds a browser's signed CSRF token.
COOKIE = "batchy_dashboard_csrf"

#: The headers of every response. Pages load only the dashboard's own script and
#: stylesheet; inline style attributes stay allowed (a sharded run's progress bar
#: is one), inline scripts do not, so text a job put on a page can never run. Only
#: pages of the same origin may frame it: a page of another site (or of a sibling
#: subdomain, whose requests carry the SameSite cookie) cannot put the action
#: buttons under a decoy.
HEADERS = (
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        b"img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; "
        b"frame-ancestors 'self'",
    ),
    (b"x-frame-options", b"SAMEORIGIN"),  # frame-ancestors, for browsers without CSP 2
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)

#: The authentication hook: given the request, whether it may proceed (or raise).
Auth = Callable[[Request], bool | Awaitable[bool]]


class Tokens:
    """Per-session CSRF tokens, signed with ``secret``."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _sign(self, token: str) -> str:
        return hmac.new(self._secret, token.encode(), hashlib.sha256).hexdigest()

    def cookie_token(self, request: Request) -> str | None:
        """The token of the request's cookie, if its signature is ours."""
        token, _, signature = request.cookies.get(COOKIE, "").partition(".")
        if token and _same(signature, self._sign(token)):
            return token
        return None

    def token_for(self, request: Request) -> tuple[str, str | None]:
        """The token the page's forms carry, and a cookie value to set when it is new."""
        token = self.cookie_token(request)
        if token is not None:
            return token, None
        token = secrets.token_urlsafe(24)
        return token, f"{token}.{self._sign(token)}"

    def check(self, request: Request, sent: str | None) -> str | None:
        """Why a POST fails the CSRF check (None: it passes)."""
        token = self.cookie_token(request)
        if token is None:
            return (
                "the dashboard's CSRF cookie is missing or was not signed with this "
                "dashboard's secret (a restart with a new random secret, or another "
                "process of the same dashboard); reload the page and try again, and give "
                "every process the same secret_key= (or $BATCHY_DASHBOARD_SECRET)"
            )
        if not sent or not _same(sent, token):
            return (
                f"the form's CSRF token {_short(sent)} is not this browser session's; the "
                "action must come from a form of this dashboard: reload the page and try again"
            )
        return None


def _same(given: str, ours: str) -> bool:
    """Whether ``given`` (from the request: any text) is ``ours``, in constant time.

    As bytes: compare_digest refuses a str that is not ASCII, and an "é" in a
    form or a cookie (which a page of a sibling subdomain can set) would fail
    the page rather than the check.
    """
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), ours.encode())


def _short(token: str | None) -> str:
    if not token:
        return "(none)"
    return repr(token[:8] + "…") if len(token) > 8 else repr(token)


class Headers:
    """ASGI middleware: :data:`HEADERS` on every HTTP response, unless the response set its own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [(k, v) for k, v in HEADERS if k not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class AuthGate:
    """ASGI middleware: ``auth(request)`` decides each HTTP request before the dashboard sees it."""

    def __init__(self, app: ASGIApp, auth: Auth) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            answer: Any = self.auth(request)
            if inspect.isawaitable(answer):
                answer = await answer
        except HTTPException as refused:
            response: Response = PlainTextResponse(
                refused.detail, status_code=refused.status_code, headers=refused.headers
            )
            await response(scope, receive, send)
            return
        if not answer:
            response = PlainTextResponse(
                f"batchy dashboard: the auth hook {_name(self.auth)} refused "
                f"{request.method} {request.url.path}; sign in as a user it allows, or "
                "change the hook passed to create_app(auth=...)",
                status_code=403,
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class HostGuard:
    """ASGI middleware: only requests whose ``Host`` names one of ``names`` reach the app.

    A name is a host without its port, ``*.example.com`` for its subdomains, or
    ``*`` for any. A request without a ``Host`` header passes: every browser sends one.
    """

    def __init__(self, app: ASGIApp, names: Sequence[str], hint: str) -> None:
        self.app = app
        self.names = [n.lower().rstrip(".") for n in names]
        self.hint = hint  # how to reach the dashboard instead, or allow a name

    def allows(self, host: str) -> bool:
        return any(
            n in ("*", host) or (n.startswith("*.") and host.endswith(n[1:])) for n in self.names
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == b"host"), None)
        host = None if given is None else host_of(given.decode("latin-1"))
        if given is None or (host is not None and self.allows(host)):
            await self.app(scope, receive, send)
            return
        shown = given.decode("latin-1")[:100]
        response = PlainTextResponse(
            f"batchy dashboard: this request was addressed to {shown!r}, which is not a name "
            f"this dashboard answers to ({', '.join(self.names)}); {self.hint}",
            status_code=400,
            headers={k.decode(): v.decode() for k, v in HEADERS},
        )
        await response(scope, receive, send)


def host_of(header: str) -> str | None:
    """The host of a ``Host`` header, lower case, without its port (None: not a host)."""
    header = header.strip().lower()
    if header.startswith("["):  # an IPv6 address: [::1]:8000
        end = header.find("]")
        rest = header[end + 1 :]
        if end < 0 or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return header[1:end]
    name, colon, port = header.partition(":")
    if not name or (colon and not port.isdigit()):
        return None
    return name.rstrip(".")


def _name(fn: object) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def safe_next(target: str | None, home: str) -> str:
    """``target`` if it is a path on this site (no scheme, no host), else ``home``."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return home
    return target
