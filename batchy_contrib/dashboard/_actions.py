"""The dashboard's actions: POSTs that delete, run now, cancel, retry or delete dead jobs.

Each action is refused before anything is read from the store when the
dashboard is read-only or the form's CSRF token is not the session's; then it
goes through :class:`batchy.jobs.Admin`, which applies it to every chosen job
or, if one cannot take it, to none (its error is shown, with the fix). After
an action the browser is sent back to the page it came from (POST, redirect,
GET), with a notice saying what was done.
"""

from __future__ import annotations

import urllib.parse

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ._dashboard import of, screened
from ._security import safe_next

__all__ = ["ACTIONS", "ROUTES"]

#: The actions, by the name in their URL (``POST /actions/<name>``).
ACTIONS = ("delete", "run_now", "cancel", "retry_dead", "delete_dead")

#: A form bigger than this is no dashboard form (ids of a page of 1,000 jobs fit).
MAX_FORM = 256 * 1024


async def act(request: Request) -> Response:
    dash = of(request)
    action = request.path_params["action"]

    def refuse(status: int, message: str) -> Response:
        return dash.render(request, "error.html", {"title": "Not done", "message": message}, status)

    if dash.read_only:
        return refuse(
            403,
            f"this dashboard is read-only (create_app(read_only=True)), so {action!r} was "
            "refused and nothing changed; act with the `batchy jobs` / `batchy dead` "
            "commands, or from a dashboard made without read_only",
        )
    if action not in ACTIONS:
        return refuse(404, f"there is no action {action!r}; the actions are {', '.join(ACTIONS)}")
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    if kind != "application/x-www-form-urlencoded":
        return refuse(
            415,
            f"action {action!r} takes a form (application/x-www-form-urlencoded), not "
            f"{kind or 'a body without a content type'}; post it from the dashboard's pages",
        )
    body = await _form(request)
    if body is None:
        return refuse(
            413, f"the form of action {action!r} is more than {MAX_FORM} bytes; act on fewer "
            "jobs at once (a page at a time)",
        )  # fmt: skip
    form = urllib.parse.parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    problem = dash.tokens.check(request, (form.get("csrf") or [""])[0])
    if problem is not None:
        return refuse(403, f"action {action!r} refused, nothing changed: {problem}")
    ids = [screened("job id", i) for i in form.get("id", []) if i]
    everything = (form.get("all") or [""])[0] == "1"
    if everything and action in ("retry_dead", "delete_dead"):
        queue = screened("queue", (form.get("queue") or [""])[0] or None)
        job = screened("job", (form.get("job") or [""])[0] or None)
        method = dash.admin.retry_dead if action == "retry_dead" else dash.admin.delete_dead
        count = await method(queue=queue, job=job)
    elif not ids:
        return refuse(
            400,
            f"action {action!r} was sent without a job id; tick the jobs to act on (or use "
            "the button of one job) and send it again",
        )
    else:
        count = await getattr(dash.admin, action)(ids)
    back = safe_next((form.get("next") or [""])[0], dash.href(request, "/"))
    glue = "&" if "?" in back else "?"
    notice = urllib.parse.urlencode({"notice": action, "n": count})
    return RedirectResponse(back + glue + notice, status_code=303)


async def _form(request: Request) -> bytes | None:
    """The request's body, or None once it is longer than :data:`MAX_FORM`.

    Read no further than that: anyone who reaches the dashboard can post (the
    CSRF check needs the form), and a body read whole first would hold all of
    a 1 GB post in the server's memory.
    """
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > MAX_FORM:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            return None
    return bytes(body)


ROUTES = [Route("/actions/{action}", act, methods=["POST"], name="act")]
