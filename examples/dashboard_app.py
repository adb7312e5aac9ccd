"""The jobs dashboard inside a Starlette app, behind HTTP Basic auth: operators act, viewers look.

Two dashboards of one queue are mounted: ``/admin/jobs`` for everyone signed
in, where only operators may act (the auth hook refuses everybody else's
POSTs), and ``/status/jobs``, read-only, where nobody can change anything.
Serve it with uvicorn::

    JOBS_DB=batchy-jobs.db uvicorn examples.dashboard_app:app --port 8000
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from batchy.jobs import Queue
from batchy_contrib.dashboard import create_app

queue = Queue(os.environ.get("JOBS_DB", "batchy-jobs.db"))

# Your user store goes here (with hashed passwords); plain ones keep the example short.
OPERATORS = {"ada": "lovelace"}  # may retry, delete and cancel jobs
VIEWERS = {"bob": "builder"}  # may look


def signed_in(request: Request) -> str:
    """The user of the request's HTTP Basic credentials; a 401 asking for them otherwise."""
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    try:
        user, _, password = base64.b64decode(encoded).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        user, password = "", ""
    known = OPERATORS.get(user) or VIEWERS.get(user)
    # Bytes: compare_digest refuses str with non-ASCII characters (a TypeError, a 500).
    same = hmac.compare_digest(password.encode(), (known or "").encode())
    if scheme.lower() != "basic" or known is None or not same:
        raise HTTPException(401, "sign in", headers={"WWW-Authenticate": 'Basic realm="jobs"'})
    return user


def operators_act(request: Request) -> bool:
    """Everyone signed in may look; only operators may send an action (a POST)."""
    user = signed_in(request)
    return request.method in ("GET", "HEAD") or user in OPERATORS


def anyone_signed_in(request: Request) -> bool:
    signed_in(request)
    return True


async def home(request: Request) -> PlainTextResponse:
    return PlainTextResponse("the app; its jobs are at /admin/jobs/")


app = Starlette(
    routes=[
        Route("/", home),
        Mount("/admin/jobs", create_app(queue, auth=operators_act)),
        Mount("/status/jobs", create_app(queue, read_only=True, auth=anyone_signed_in)),
    ]
)
