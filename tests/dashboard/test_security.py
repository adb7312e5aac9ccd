"""The dashboard's guards: CSRF tokens on every action, read-only mode, the auth hook, mounting.

Security does not depend on the store, so these run on the memory store; each
refused request is checked against what the store still holds.
"""

from __future__ import annotations

import html as htmllib
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from board_app import Board, Seeded, seed
from dash_helpers import SECRET, csrf_of
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.routing import Mount

from batchy.jobs import ConfigError, MemoryBackend, Queue
from batchy_contrib.dashboard import DashboardError, create_app
from batchy_contrib.dashboard._security import COOKIE, safe_next


@pytest.fixture
async def mem() -> AsyncIterator[tuple[Board, Seeded]]:
    board = Board(Queue(MemoryBackend()))
    yield board, await seed(board)


def client_of(app: Starlette) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://dash")


def error_of(page: httpx.Response) -> str:
    found = re.search(r'<p class="error" role="alert">(.*?)</p>', page.text, re.S)
    return htmllib.unescape(found.group(1)) if found else page.text


async def still_dead(board: Board, seeded: Seeded) -> bool:
    return all([(await board.queue.admin.job(i)).state == "dead" for i in seeded.dead])


async def test_an_action_without_the_session_cookie_is_refused(mem) -> None:
    board, seeded = mem
    async with client_of(create_app(board.queue, secret_key=SECRET)) as c:
        token = csrf_of((await c.get("/dead")).text)
        c.cookies.clear()  # another site's form: the browser may send no cookie
        page = await c.post("/actions/retry_dead", data={"csrf": token, "all": "1"})
    assert page.status_code == 403
    assert error_of(page).startswith(
        "action 'retry_dead' refused, nothing changed: the dashboard's CSRF cookie is "
        "missing or was not signed with this dashboard's secret"
    )
    assert await still_dead(board, seeded)


async def test_an_action_with_another_token_is_refused(mem) -> None:
    board, seeded = mem
    async with client_of(create_app(board.queue, secret_key=SECRET)) as c:
        await c.get("/dead")  # the cookie is set
        page = await c.post("/actions/retry_dead", data={"csrf": "guessed-token", "all": "1"})
        empty = await c.post("/actions/retry_dead", data={"all": "1"})
    assert page.status_code == 403
    assert "the form's CSRF token 'guessed-…' is not this browser session's" in error_of(page)
    assert "the form's CSRF token (none) is not" in error_of(empty)
    assert await still_dead(board, seeded)


async def test_a_cookie_signed_with_another_secret_is_refused(mem) -> None:
    board, seeded = mem
    async with client_of(create_app(board.queue, secret_key="another secret, also long")) as c:
        forged = (await c.get("/dead")).cookies[COOKIE]
        token = forged.partition(".")[0]
    async with client_of(create_app(board.queue, secret_key=SECRET)) as c:
        c.cookies.set(COOKIE, forged)
        page = await c.post("/actions/retry_dead", data={"csrf": token, "all": "1"})
    assert page.status_code == 403 and "not signed with this dashboard's secret" in error_of(page)
    assert await still_dead(board, seeded)


async def test_the_cookie_is_http_only_and_same_site_strict(mem) -> None:
    board, _ = mem
    async with client_of(create_app(board.queue, secret_key=SECRET)) as c:
        first = await c.get("/jobs")
        again = await c.get("/dead")
    header = first.headers["set-cookie"]
    assert header.startswith(f"{COOKIE}=") and "HttpOnly" in header
    assert "SameSite=strict" in header and "Path=/" in header
    assert "set-cookie" not in again.headers  # one token per session
    assert csrf_of(first.text) == csrf_of(again.text)


async def test_read_only_shows_no_action_and_refuses_every_one(mem) -> None:
    board, seeded = mem
    app = create_app(board.queue, read_only=True, secret_key=SECRET)
    async with client_of(app) as c:
        for path in ("/", "/jobs", f"/jobs/{seeded.dead[0]}", "/dead", "/scheduled"):
            page = await c.get(path)
            assert page.status_code == 200, path
            assert 'method="post"' not in page.text, path
            assert "read-only" in page.text
        token = c.cookies[COOKIE].partition(".")[0]  # a valid session token: still refused
        for action in ("retry_dead", "delete_dead", "delete", "run_now", "cancel"):
            page = await c.post(f"/actions/{action}", data={"csrf": token, "all": "1"})
            assert page.status_code == 403, action
            assert error_of(page).startswith(
                f"this dashboard is read-only (create_app(read_only=True)), so {action!r} "
                "was refused and nothing changed"
            )
    assert await still_dead(board, seeded)
    assert (await board.queue.admin.job(seeded.queued[0])).state == "queued"


async def test_the_auth_hook_decides_every_request(mem) -> None:
    board, _ = mem
    seen: list[str] = []

    def auth(request: Request) -> bool:
        seen.append(f"{request.method} {request.url.path}")
        return request.headers.get("x-operator") == "ada"

    async with client_of(create_app(board.queue, auth=auth, secret_key=SECRET)) as c:
        for path in ("/", "/jobs", "/dead", "/static/dashboard.css", "/no/such/page"):
            page = await c.get(path)
            assert page.status_code == 403, path
        assert page.text.startswith(
            "batchy dashboard: the auth hook "
            "test_the_auth_hook_decides_every_request.<locals>.auth refused GET /no/such/page"
        )
        page = await c.post("/actions/retry_dead", data={"all": "1"})
        assert page.status_code == 403
        c.headers["x-operator"] = "ada"
        token = csrf_of((await c.get("/dead")).text)
        page = await c.post("/actions/retry_dead", data={"csrf": token, "all": "1"})
        assert page.status_code == 303
    assert "POST /actions/retry_dead" in seen
    assert (await board.queue.admin.info()).dead == 0


async def test_the_auth_hook_may_be_async_and_may_ask_for_a_password(mem) -> None:
    board, seeded = mem

    async def auth(request: Request) -> bool:
        if "authorization" not in request.headers:
            raise HTTPException(401, "who are you?", headers={"WWW-Authenticate": "Basic"})
        # Anybody signed in may look; only GETs, so no action for them.
        return request.method == "GET"

    async with client_of(create_app(board.queue, auth=auth, secret_key=SECRET)) as c:
        page = await c.get("/")
        assert page.status_code == 401 and page.headers["www-authenticate"] == "Basic"
        c.headers["authorization"] = "Basic eDp5"
        page = await c.get("/dead")
        assert page.status_code == 200
        page = await c.post("/actions/retry_dead", data={"csrf": csrf_of(page.text), "all": "1"})
        assert page.status_code == 403
    assert await still_dead(board, seeded)


async def test_mounted_under_a_prefix(mem) -> None:
    board, seeded = mem
    app = Starlette(routes=[Mount("/ops/jobs", create_app(board.queue, secret_key=SECRET))])
    async with client_of(app) as c:
        page = await c.get("/ops/jobs/dead")
        assert page.status_code == 200
        assert 'href="/ops/jobs/static/dashboard.css"' in page.text
        assert f'href="/ops/jobs/jobs/{seeded.dead[0]}"' in page.text
        assert 'action="/ops/jobs/actions/retry_dead"' in page.text
        assert "Path=/ops/jobs" in page.headers["set-cookie"]
        assert (await c.get("/ops/jobs/static/dashboard.js")).status_code == 200
        page = await c.post(
            "/ops/jobs/actions/retry_dead",
            data={"csrf": csrf_of(page.text), "id": seeded.dead[0], "next": "/ops/jobs/dead"},
        )
        assert page.headers["location"] == "/ops/jobs/dead?notice=retry_dead&n=1"
    assert (await board.queue.admin.job(seeded.dead[0])).state == "queued"


async def test_malformed_actions_are_refused(mem) -> None:
    board, seeded = mem
    async with client_of(create_app(board.queue, secret_key=SECRET)) as c:
        token = csrf_of((await c.get("/dead")).text)
        page = await c.post("/actions/explode", data={"csrf": token})
        assert page.status_code == 404
        assert error_of(page) == (
            "there is no action 'explode'; the actions are delete, run_now, cancel, "
            "retry_dead, delete_dead"
        )
        page = await c.post("/actions/retry_dead", json={"csrf": token, "all": "1"})
        assert page.status_code == 415
        assert error_of(page).startswith(
            "action 'retry_dead' takes a form (application/x-www-form-urlencoded), not "
            "application/json"
        )
        page = await c.post("/actions/retry_dead", data={"csrf": token})
        assert page.status_code == 400
        assert error_of(page).startswith("action 'retry_dead' was sent without a job id")
        big = {"csrf": token, "id": ["x" * 100] * 3000}
        page = await c.post("/actions/delete", data=big)
        assert page.status_code == 413 and "more than 262144" in error_of(page)
        page = await c.get("/actions/retry_dead")
        assert page.status_code == 405  # actions are POSTs only
    assert await still_dead(board, seeded)


async def test_a_redirect_never_leaves_the_site(mem) -> None:
    board, seeded = mem
    async with client_of(create_app(board.queue, secret_key=SECRET)) as c:
        token = csrf_of((await c.get("/dead")).text)
        page = await c.post(
            "/actions/retry_dead",
            data={"csrf": token, "id": seeded.dead[0], "next": "https://evil.example/"},
        )
    assert page.headers["location"] == "/?notice=retry_dead&n=1"
    assert safe_next("//evil.example/x", "/") == "/"
    assert safe_next("/\\evil.example", "/") == "/"
    assert safe_next("/dead?queue=a", "/") == "/dead?queue=a"


async def test_every_response_keeps_out_of_other_sites_frames(mem) -> None:
    # A page with action buttons that another site can frame can have them clicked
    # through a decoy; a page that runs inline script runs what a job put there.
    board, seeded = mem

    def refuse(request: Request) -> bool:
        if request.method != "GET":
            raise HTTPException(401, "sign in", headers={"WWW-Authenticate": "Basic"})
        return True

    async with client_of(create_app(board.queue, secret_key=SECRET, auth=refuse)) as c:
        token = csrf_of((await c.get("/dead")).text)
        answers = [
            await c.get("/"),
            await c.get(f"/jobs/{seeded.dead[0]}"),
            await c.get("/jobs/no-such-job"),  # an error page
            await c.get("/static/dashboard.js"),
            await c.post("/actions/delete", data={"csrf": token}),  # the hook's 401
        ]
    async with client_of(create_app(board.queue, secret_key=SECRET)) as c:
        token = csrf_of((await c.get("/dead")).text)
        answers.append(
            await c.post("/actions/retry_dead", data={"csrf": token, "id": seeded.dead[0]})
        )
    assert [a.status_code for a in answers] == [200, 200, 404, 200, 401, 303]
    for answer in answers:
        policy = answer.headers["content-security-policy"]
        assert "frame-ancestors 'self'" in policy
        assert "script-src 'self';" in policy
        assert answer.headers["x-frame-options"] == "SAMEORIGIN"
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] == "same-origin"


def test_create_app_says_what_it_needs() -> None:
    queue = Queue(MemoryBackend())
    with pytest.raises(DashboardError) as error:
        create_app("app:queue")  # type: ignore[arg-type]
    assert str(error.value) == (
        "create_app(queue='app:queue'): expected the batchy.jobs.Queue your jobs are "
        "declared on (the one `batchy worker` is given)"
    )
    with pytest.raises(DashboardError) as error:
        create_app(queue, auth="admin")  # type: ignore[arg-type]
    assert str(error.value).startswith(
        "create_app(auth='admin'): expected a callable taking the request and returning "
        "whether it may proceed"
    )
    with pytest.raises(DashboardError) as error:
        create_app(queue, secret_key="short")
    assert str(error.value) == (
        "create_app(secret_key=...): the key is 5 bytes long; a key that signs CSRF tokens "
        "needs at least 16 (e.g. secrets.token_hex(32))"
    )
    with pytest.raises(DashboardError) as error:
        create_app(queue, refresh=-1)
    assert str(error.value).startswith("create_app(refresh=-1): expected seconds between")
    assert issubclass(DashboardError, ConfigError)


def test_a_short_secret_from_the_environment_is_named_as_such(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `batchy dashboard` with BATCHY_DASHBOARD_SECRET=short said "create_app(secret_key=...):
    # the key is 5 bytes long", naming an argument its user never wrote.
    monkeypatch.setenv("BATCHY_DASHBOARD_SECRET", "short")
    with pytest.raises(DashboardError) as error:
        create_app(Queue(MemoryBackend()))
    assert str(error.value) == (
        "$BATCHY_DASHBOARD_SECRET is 5 bytes long; a key that signs CSRF tokens needs at "
        "least 16 (e.g. secrets.token_hex(32))"
    )


async def test_every_process_with_the_same_secret_accepts_the_token(
    mem, monkeypatch: pytest.MonkeyPatch
) -> None:
    board, seeded = mem
    monkeypatch.setenv("BATCHY_DASHBOARD_SECRET", SECRET)
    async with client_of(create_app(board.queue)) as first:
        page = await first.get("/dead")
        cookie, token = page.cookies[COOKIE], csrf_of(page.text)
    async with client_of(create_app(board.queue)) as second:  # another process, say
        second.cookies.set(COOKIE, cookie)
        page = await second.post("/actions/retry_dead", data={"csrf": token, "id": seeded.dead[0]})
    assert page.status_code == 303


@pytest.mark.parametrize(
    ("host", "read_only", "auth", "warned"),
    [
        ("0.0.0.0", False, None, True),
        ("192.168.1.5", False, None, True),
        ("::", False, None, True),
        ("127.0.0.1", False, None, False),
        ("localhost", False, None, False),
        ("0.0.0.0", True, None, False),
        ("0.0.0.0", False, object(), False),
    ],
)
def test_a_dashboard_open_beyond_this_machine_without_auth_is_warned_of(
    host: str, read_only: bool, auth: object, warned: bool
) -> None:
    # `batchy dashboard --host 0.0.0.0` without --auth said nothing, and anyone who
    # could reach the port could delete, retry and cancel jobs.
    from batchy_contrib.dashboard.serve import unguarded

    assert unguarded(host, read_only, auth) is warned


async def test_serve_prints_the_warning_before_it_listens(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import uvicorn

    from batchy.jobs import MemoryBackend, Queue
    from batchy_contrib.dashboard.serve import serve

    async def listens(self: object) -> None:
        return None

    monkeypatch.setattr(uvicorn.Server, "serve", listens)
    await serve(Queue(MemoryBackend()), host="0.0.0.0", port=8123)
    err = capsys.readouterr().err
    assert err.startswith("warning: the dashboard listens on 0.0.0.0, beyond this machine, ")
    assert "give --auth (or --read-only)" in err
    await serve(Queue(MemoryBackend()), host="127.0.0.1", port=8123)
    assert capsys.readouterr().err == ""


async def test_error_pages_keep_out_of_other_sites_frames_too(
    mem, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A page that failed (an exception in a route, a store that raised) was drawn by
    # Starlette's outermost error middleware, outside the one that adds the headers:
    # the 500 page could be framed, and sniffed into another type.
    board, _ = mem

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the store broke")

    monkeypatch.setattr(board.queue.admin, "info", broken)
    app = create_app(board.queue, secret_key=SECRET)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://dash") as c:
        answers = {
            "store raised": await c.get("/"),
            "no such page": await c.get("/no/such/page"),
            "no such file": await c.get("/static/nothing.css"),
            "GET of an action": await c.get("/actions/delete"),
            "HEAD": await c.head("/keys"),
            "OPTIONS": await c.options("/keys"),
        }

    def auth(request: Request) -> bool:
        raise RuntimeError("the user directory broke")

    app = create_app(board.queue, secret_key=SECRET, auth=auth)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://dash") as c:
        answers["auth hook raised"] = await c.get("/dead")
    assert {what: a.status_code for what, a in answers.items()} == {
        "store raised": 500,
        "no such page": 404,
        "no such file": 404,
        "GET of an action": 405,
        "HEAD": 200,
        "OPTIONS": 405,
        "auth hook raised": 500,
    }
    assert "the dashboard failed on this page" in answers["store raised"].text
    for what, answer in answers.items():
        assert answer.headers.get("x-frame-options") == "SAMEORIGIN", what
        assert "frame-ancestors 'self'" in answer.headers["content-security-policy"], what
        assert answer.headers["x-content-type-options"] == "nosniff", what
        assert answer.headers["referrer-policy"] == "same-origin", what


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
async def test_a_form_too_big_is_refused_before_it_is_read_whole(mem, declared: bool) -> None:
    # The whole body was read into memory before its size was checked (and before
    # the CSRF token was): a 300 MB POST took 300 MB of the server's memory, from
    # anyone who could reach the dashboard.
    board, _ = mem
    app = create_app(board.queue, secret_key=SECRET)
    chunk, chunks = b"id=" + b"x" * (64 * 1024 - 4) + b"&", 1600  # 100 MB
    pulled = 0
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        nonlocal pulled
        pulled += 1
        return {"type": "http.request", "body": chunk, "more_body": pulled < chunks}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"content-type", b"application/x-www-form-urlencoded"), (b"host", b"dash")]
    if declared:
        headers.append((b"content-length", str(len(chunk) * chunks).encode()))
    scope = {
        "type": "http", "method": "POST", "path": "/actions/delete", "raw_path": b"/actions/delete",
        "query_string": b"", "headers": headers, "scheme": "http", "server": ("dash", 80),
        "root_path": "", "http_version": "1.1", "client": ("127.0.0.1", 1),
    }  # fmt: skip
    await app(scope, receive, send)
    assert sent[0]["status"] == 413
    assert pulled == (0 if declared else 5)  # 5 chunks of 64 kB: past the limit
    body = htmllib.unescape(b"".join(m.get("body", b"") for m in sent[1:]).decode())
    assert (
        "the form of action 'delete' is more than 262144 bytes; act on fewer jobs at once"
    ) in body


async def test_a_token_or_cookie_with_other_characters_is_refused_not_a_500(mem) -> None:
    # hmac.compare_digest takes only ASCII str: a form token with an "é" was a 500,
    # and a cookie with one in its signature (which a page of a sibling subdomain
    # can set) made every page a 500 for that browser, until the cookie was cleared.
    board, seeded = mem
    app = create_app(board.queue, secret_key=SECRET)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://dash") as c:
        await c.get("/dead")
        page = await c.post("/actions/retry_dead", data={"csrf": "jeton-é", "all": "1"})
        assert page.status_code == 403
        assert "the form's CSRF token 'jeton-é' is not this browser session's" in error_of(page)
        c.cookies.clear()
        tossed = {"cookie": f"{COOKIE}=abc.sign\xe9".encode("latin-1")}
        page = await c.get("/dead", headers=tossed)
        assert page.status_code == 200
        assert f"{COOKIE}=" in page.headers["set-cookie"]  # a new session, signed by us
        page = await c.post("/actions/retry_dead", data={"csrf": "abc", "all": "1"}, headers=tossed)
        assert page.status_code == 403 and "not signed with this dashboard's secret" in error_of(
            page
        )
    assert await still_dead(board, seeded)


def served(host: str = "127.0.0.1", **options: Any) -> httpx.AsyncClient:
    from batchy_contrib.dashboard.serve import served_app

    app = served_app(Queue(MemoryBackend()), host, 8000, **options)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://dash")


@pytest.mark.parametrize(
    "address", ["127.0.0.1:8000", "localhost:8000", "LOCALHOST", "[::1]:8000", "localhost.:8000"]
)
async def test_a_local_dashboard_answers_this_machines_names(address: str) -> None:
    async with served() as c:
        page = await c.get("/", headers={"host": address})
    assert page.status_code == 200


@pytest.mark.parametrize("address", ["evil.example:8000", "evil.example", "127.0.0.1.evil.example"])
async def test_a_local_dashboard_without_auth_refuses_other_sites_names(address: str) -> None:
    # DNS rebinding: a page of evil.example, its name pointed at 127.0.0.1, is to the
    # browser of the same origin as the dashboard it then reaches: it read every page
    # (and their CSRF tokens) and could delete, retry and cancel jobs.
    async with served() as c:
        page = await c.get("/", headers={"host": address})
        action = await c.post("/actions/retry_dead", headers={"host": address})
    assert page.status_code == action.status_code == 400
    assert page.text == (
        f"batchy dashboard: this request was addressed to {address!r}, which is not a name "
        "this dashboard answers to (localhost, 127.0.0.1, ::1); open http://127.0.0.1:8000/ "
        "on this machine, or, behind a proxy or under another name, give --allowed-host "
        "NAME (allowed_hosts=) and --auth"
    )
    assert page.headers["x-frame-options"] == "SAMEORIGIN"


async def test_a_dashboard_answers_the_names_it_is_given() -> None:
    async with served(allowed=["jobs.internal", "*.ops.example"]) as c:
        ok = [await c.get("/", headers={"host": h}) for h in ("jobs.internal", "a.ops.example")]
        refused = await c.get("/", headers={"host": "127.0.0.1:8000"})
    assert [p.status_code for p in ok] == [200, 200]
    assert refused.status_code == 400
    assert "add it with --allowed-host (allowed_hosts=) if it is yours" in refused.text
    async with served(allowed=["*"]) as c:
        assert (await c.get("/", headers={"host": "anything"})).status_code == 200


@pytest.mark.parametrize(("host", "auth"), [("127.0.0.1", lambda request: True), ("0.0.0.0", None)])
async def test_a_dashboard_with_auth_or_beyond_this_machine_takes_any_name(
    host: str, auth: Any
) -> None:
    # Credentials do not follow a page to another origin; on 0.0.0.0 the names
    # people use are not known (and the dashboard is warned about without --auth).
    async with served(host, auth=auth) as c:
        assert (await c.get("/", headers={"host": "jobs.internal"})).status_code == 200


@pytest.mark.parametrize("name", ["http://jobs.internal", "jobs.internal:80", "a*.b", "", "x/y"])
def test_an_allowed_host_that_is_not_a_name_is_refused(name: str) -> None:
    from batchy_contrib.dashboard.serve import served_app

    with pytest.raises(DashboardError) as caught:
        served_app(Queue(MemoryBackend()), "127.0.0.1", 8000, allowed=[name])
    assert str(caught.value) == (
        f"allowed host {name!r} is not a host name: give one without scheme, port or path "
        "(jobs.example.com, 10.0.0.5, ::1), *.example.com for its subdomains, or * for any"
    )


def test_the_cli_passes_allowed_hosts_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import batchy.__main__ as cli

    seen: dict[str, Any] = {}

    async def serve(queue: Queue, **options: Any) -> None:
        seen.update(options)

    import batchy_contrib.dashboard.serve as serving

    monkeypatch.setattr(serving, "serve", serve)
    with pytest.raises(SystemExit) as ended:
        cli.main(
            ["dashboard", "board_app:queue", "--allowed-host", "a.example", "--allowed-host", "::1"]
        )
    assert ended.value.code == 0
    assert seen["allowed_hosts"] == ["a.example", "::1"]
