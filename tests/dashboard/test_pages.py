"""Every page and action of the dashboard on every store (memory, SQLite, Redis, PostgreSQL).

The board (``board_app``) runs jobs of every kind through a real worker, then
leaves jobs waiting in every state; the tests read the pages over HTTP and
check them against what the store holds, and after each action, what it holds
then.
"""

from __future__ import annotations

import asyncio
import html as htmllib
import re
import time
import urllib.parse

import httpx
import pytest
from board_app import CALLS, Board, Seeded
from dash_helpers import SECRET, csrf_of, drawn, line_values

from batchy.jobs import JobNotFound, Worker

pytestmark = pytest.mark.timeout(90)


def text(page: httpx.Response) -> str:
    """The page's HTML with entities decoded (for messages with quotes in them)."""
    return htmllib.unescape(page.text)


async def test_overview_shows_each_queue_and_the_throughput_chart(
    board: Board, seeded: Seeded, client: httpx.AsyncClient
) -> None:
    page = await client.get("/")
    assert page.status_code == 200
    info = await board.queue.admin.info()
    sizes = {q.name: q.size for q in info.queues}
    assert sizes["mail"] == 5 and sizes["billing"] == 2  # the welcomes; two keys' heads
    for name, size in sizes.items():
        row = re.search(rf'<tr data-queue="{name}">.*?data-size>(\d+)<', page.text, re.S)
        assert row and int(row.group(1)) == size, name
    assert re.search(r'data-count="dead">3<', page.text)
    # What the worker counted and wrote to the store, drawn minute by minute.
    processed = drawn(page.text, "throughput", "processed")
    failed = drawn(page.text, "throughput", "failed")
    assert sum(v for _, v in processed) == seeded.processed
    assert sum(v for _, v in failed) == seeded.failed
    assert 'data-chart="spark-mail"' in page.text


async def test_jobs_by_state_with_search(
    board: Board, seeded: Seeded, client: httpx.AsyncClient
) -> None:
    page = await client.get("/jobs", params={"state": "queued", "queue": "mail"})
    assert page.status_code == 200
    assert re.findall(r'<tr data-job="(\w+)">', page.text) == seeded.queued
    page = await client.get("/jobs", params={"state": "scheduled", "job": "send_welcome"})
    assert re.findall(r'<tr data-job="(\w+)">', page.text) == seeded.scheduled
    page = await client.get("/jobs", params={"state": "blocked", "key": "sync_account:acme"})
    assert re.findall(r'<tr data-job="(\w+)">', page.text) == seeded.keyed[1:3]
    page = await client.get("/jobs", params={"state": "retrying"})
    assert 'data-job="reindex:2026-06:3"' in page.text
    assert "search cluster unreachable from shard 3" in page.text
    page = await client.get("/jobs", params={"state": "running"})
    assert "No running jobs." in page.text
    # Pages follow the store's cursor.
    first = await client.get("/jobs", params={"state": "queued", "queue": "mail", "limit": 2})
    ids = re.findall(r'<tr data-job="(\w+)">', first.text)
    cursor = re.search(r'class="next" href="[^"]*after=([^&"]+)', first.text)
    assert ids == seeded.queued[:2] and cursor
    second = await client.get(
        "/jobs", params={"state": "queued", "queue": "mail", "limit": 2, "after": cursor.group(1)}
    )
    assert re.findall(r'<tr data-job="(\w+)">', second.text) == seeded.queued[2:4]
    # The id box goes straight to a job's page.
    found = await client.get("/jobs", params={"id": seeded.queued[0]})
    assert found.status_code == 303 and found.headers["location"] == f"/jobs/{seeded.queued[0]}"


async def test_job_details(board: Board, seeded: Seeded, client: httpx.AsyncClient) -> None:
    page = await client.get(f"/jobs/{seeded.dead[0]}")
    assert page.status_code == 200
    body = text(page)
    assert "charge_card" in body and "<pre>[101]</pre>" in body
    assert "card of user101@example.com declined for order 101" in body
    assert 'class="traceback"' in body and "Traceback (most recent call last)" in body
    assert 'data-action="retry_dead"' in body and 'data-action="delete"' not in body.split(
        "<dl", 1
    )[0].replace('data-action="delete_dead"', "")
    page = await client.get(f"/jobs/{seeded.scheduled[0]}")
    assert 'data-action="run_now"' in page.text and "next run" in page.text


async def test_dead_set_with_tracebacks(seeded: Seeded, client: httpx.AsyncClient) -> None:
    page = await client.get("/dead")
    assert page.status_code == 200
    assert sorted(re.findall(r'<li data-job="(\w+)">', page.text)) == sorted(seeded.dead)
    body = text(page)
    for order in (101, 102, 103):
        assert f"declined for order {order}" in body
    assert body.count('<pre class="traceback">Traceback (most recent call last)') == 3
    filtered = await client.get("/dead", params={"job": "send_welcome"})
    assert "No dead jobs match this search." in filtered.text


async def test_scheduled_and_periodic(seeded: Seeded, client: httpx.AsyncClient) -> None:
    page = await client.get("/scheduled")
    assert re.findall(r'<tr data-job="(\w+)">', page.text) == seeded.scheduled
    assert '<tr data-periodic="usage_report">' in page.text
    assert "*/15 * * * *" in page.text


async def test_workers_keys_and_shards(
    board: Board, seeded: Seeded, client: httpx.AsyncClient
) -> None:
    page = await client.get("/workers")
    assert "No live workers." in page.text  # the seeding worker said goodbye
    page = await client.get("/keys")
    busiest = page.text[page.text.index('data-keys="busiest"') :]
    assert re.findall(r'<tr data-key="([^"]+)">', busiest) == [
        "sync_account:acme",
        "sync_account:globex",
    ]
    page = await client.get("/shards")
    run = re.search(r'data-run="2026-06">.*?data-done="(\d+)" data-total="(\d+)"', page.text, re.S)
    assert run and run.groups() == ("3", "4")
    # Listed from the store's record of runs (Admin.runs), with when it started.
    (recorded,) = await board.queue.admin.runs("reindex")
    assert recorded.run == "2026-06" and (recorded.done, recorded.failed) == (3, 1)
    started = re.search(r'<h3>run 2026-06 <small>started <time datetime="([^"]+)"', page.text)
    assert (
        started
        and started.group(1)
        == time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(recorded.started)) + "Z"
    )
    states = await board.queue.admin.shards("reindex", "2026-06")
    assert [s.state for s in states] == ["done", "done", "done", "retrying"]


async def test_batching_shows_what_the_loaders_saw(
    seeded: Seeded, client: httpx.AsyncClient
) -> None:
    page = await client.get("/batching")
    assert page.status_code == 200
    calls = {name: len(seen) for name, seen in CALLS.items()}
    keys = {name: sum(map(len, seen)) for name, seen in CALLS.items()}
    for name in ("users_by_id", "teams_by_id"):
        row = re.search(
            rf'<tr data-loader="{name}"><td>{name}</td><td class="num">(\d+)</td>'
            rf'<td class="num">(\d+)</td>',
            page.text,
        )
        assert row and (int(row.group(1)), int(row.group(2))) == (calls[name], keys[name]), name
    assert calls["users_by_id"] <= 2  # 43 jobs' loads, in one call (or two across a minute)
    assert sum(v for _, v in drawn(page.text, "batching", "calls")) == sum(calls.values())
    values = line_values(page.text, "rounds", "rounds per job")
    # Jobs ran this minute, or the last one when the page was read a minute on
    # (clean-clone CI once seeded at :59 and read at :00).
    assert len(values) == 60 and (values[-1] != "" or values[-2] != "")
    assert '<tr data-type="send_welcome">' in page.text


async def test_actions_change_the_store(
    board: Board, seeded: Seeded, client: httpx.AsyncClient
) -> None:
    admin = board.queue.admin
    csrf = csrf_of((await client.get("/dead")).text)

    async def post(action: str, **form: object) -> httpx.Response:
        return await client.post(f"/actions/{action}", data={"csrf": csrf, **form})

    done = await post("retry_dead", id=seeded.dead[0], next="/dead")
    assert done.status_code == 303 and done.headers["location"] == "/dead?notice=retry_dead&n=1"
    assert (await admin.job(seeded.dead[0])).state == "queued"
    shown = await client.get(done.headers["location"])
    assert "Put 1 dead job(s) back on their queues." in shown.text

    await post("delete", id=seeded.queued[0], next="/jobs")
    with pytest.raises(JobNotFound):
        await admin.job(seeded.queued[0])
    assert (await admin.job(seeded.queued[1])).state == "queued"

    await post("delete", id=seeded.queued[1:3], next="/jobs")  # the bulk form: many ids
    left = await admin.jobs("queued", queue="mail")
    assert [j.id for j in left.jobs] == seeded.queued[3:]

    await post("run_now", id=seeded.scheduled[0], next="/scheduled")
    assert (await admin.job(seeded.scheduled[0])).state == "queued"

    await post("delete_dead", id=seeded.dead[1], next="/dead")
    await post("retry_dead", all="1", queue="", job="", next="/dead")
    assert (await admin.info()).dead == 0
    assert (await admin.job(seeded.dead[2])).state == "queued"


async def test_refused_actions_say_why_and_change_nothing(
    board: Board, seeded: Seeded, client: httpx.AsyncClient
) -> None:
    admin = board.queue.admin
    csrf = csrf_of((await client.get("/jobs")).text)
    page = await client.post(
        "/actions/run_now", data={"csrf": csrf, "id": [seeded.queued[0], seeded.scheduled[0]]}
    )
    assert page.status_code == 409
    assert f"job {seeded.queued[0]} is queued" in text(page)
    assert (await admin.job(seeded.scheduled[0])).state == "scheduled"  # all or none
    page = await client.post(
        "/actions/delete", data={"csrf": csrf, "id": ["nosuchjob", seeded.queued[0]]}
    )
    assert page.status_code == 404
    error = re.search(r'<p class="error" role="alert">(.*?)</p>', text(page), re.S)
    assert error and "nosuchjob" in error.group(1)  # the store's message, naming the id
    assert (await admin.job(seeded.queued[0])).state == "queued"


async def test_unknown_job_and_bad_queries(seeded: Seeded, client: httpx.AsyncClient) -> None:
    page = await client.get("/jobs/nosuchjob")
    assert page.status_code == 404
    assert "job nosuchjob is not in" in text(page)
    page = await client.get("/jobs", params={"state": "lost"})
    assert page.status_code == 400 and "job state 'lost' cannot be listed" in text(page)
    page = await client.get("/jobs", params={"limit": "lots"})
    assert page.status_code == 400
    assert "page size limit='lots' is not a number from 1 to 1000" in text(page)


async def test_a_nul_in_an_id_or_a_filter_is_refused_alike_on_every_store(
    board: Board, seeded: Seeded, client: httpx.AsyncClient
) -> None:
    # No store keeps a NUL in an id, queue name or key (enqueue refuses them), but
    # PostgreSQL refuses one in a query too: /jobs/%00 or ?queue=%00 was a 500 there
    # (and a traceback in the log), where the other stores answered.
    csrf = csrf_of((await client.get("/jobs")).text)
    asked = {
        "job page": await client.get("/jobs/a%00b"),
        "queue filter": await client.get("/jobs?queue=mail%00"),
        "key filter": await client.get("/jobs?state=blocked&key=%00"),
        "dead queue filter": await client.get("/dead?queue=%00"),
        "sharded run": await client.get("/shards?job=reindex&run=%00"),
        "action id": await client.post(
            "/actions/delete", data={"csrf": csrf, "id": [seeded.queued[0], "x\x00"]}
        ),
        "action filter": await client.post(
            "/actions/retry_dead", data={"csrf": csrf, "all": "1", "queue": "\x00"}
        ),
    }
    assert {what: page.status_code for what, page in asked.items()} == dict.fromkeys(asked, 400)
    assert "job id 'a\\x00b' holds a NUL character (\\x00)" in text(asked["job page"])
    assert (
        text(asked["queue filter"]).count(
            "queue 'mail\\x00' holds a NUL character (\\x00), which no job id, queue name or "
            "ordering key holds (enqueue refuses them); take it out of the address or form"
        )
        == 1
    )
    assert "key '\\x00' holds a NUL" in text(asked["key filter"])
    assert "queue '\\x00' holds a NUL" in text(asked["dead queue filter"])
    assert "run '\\x00' holds a NUL" in text(asked["sharded run"])
    assert "job id 'x\\x00' holds a NUL" in text(asked["action id"])
    assert "queue '\\x00' holds a NUL" in text(asked["action filter"])
    assert (await board.queue.admin.job(seeded.queued[0])).state == "queued"
    assert (await board.queue.admin.info()).dead == len(seeded.dead)


async def test_cancel_a_running_job(board: Board, client: httpx.AsyncClient) -> None:
    started = asyncio.Event()

    @board.queue.job(name="slow", queue="slow")
    async def slow() -> None:
        started.set()
        await asyncio.sleep(60)

    handle = await slow.enqueue()
    worker = Worker(board.queue, queues=["slow"], poll_interval=0.02, lease=2.0)
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(started.wait(), 10)
        page = await client.get("/jobs", params={"state": "running"})
        assert f'<tr data-job="{handle.id}">' in page.text
        assert 'data-action="cancel"' in page.text
        done = await client.post(
            "/actions/cancel", data={"csrf": csrf_of(page.text), "id": handle.id}
        )
        assert done.status_code == 303
        deadline = time.monotonic() + 10
        while (await board.queue.admin.job(handle.id)).state != "cancelled":
            assert time.monotonic() < deadline, "the worker did not cancel the job in 10s"
            await asyncio.sleep(0.05)
    finally:
        worker.stop()
        await running


async def test_job_ids_of_any_text_link_to_their_own_page(
    board: Board, client: httpx.AsyncClient
) -> None:
    # Ids went into links unencoded: the link of job 'acme%2F2026' opened job
    # 'acme/2026' (whose Delete then acted on it), and ids with ? or # found nothing.
    send = board.queue.jobs["send_welcome"]
    ids = ["acme/2026", "acme%2F2026", "q?x", "h#1", "a b"]
    for job_id in ids:
        await send.options(id=job_id, delay=3600).enqueue(1)
    listing = (await client.get("/jobs", params={"state": "scheduled"})).text
    for job_id in ids:
        href = "/jobs/" + urllib.parse.quote(job_id, safe="")
        assert f'href="{href}"' in listing
        page = await client.get(href)
        assert page.status_code == 200 and htmllib.escape(job_id) in page.text
        found = await client.get("/jobs", params={"id": job_id}, follow_redirects=False)
        assert found.headers["location"] == href


async def test_text_no_page_can_carry_and_long_errors_do_not_break_the_pages(
    board: Board, client: httpx.AsyncClient
) -> None:
    # A lone surrogate in an argument (a file name decoded with surrogateescape)
    # made the job's page a 500; a 2 MB error was printed whole on every list page.
    @board.queue.job(name="explode", retries=0)
    async def explode(name: str) -> None:
        raise ValueError("x" * 100_000)

    handle = await explode.enqueue("report-\udce9.csv")
    await Worker(board.queue, burst=True, poll_interval=0.01, queues=["default"]).run()
    page = await client.get(f"/jobs/{handle.id}")
    assert page.status_code == 200 and "report-\\udce9.csv" in page.text
    for listing in ("/dead", "/jobs?state=dead"):
        response = await client.get(listing)
        assert response.status_code == 200 and len(response.text) < 50_000


async def test_a_shards_long_error_is_cut_on_the_shards_page(
    board: Board, client: httpx.AsyncClient
) -> None:
    # Each shard's last error was printed whole, for each of the last 20 runs of
    # each sharded job: 8 failed shards of 100 kB errors made a 0.8 MB page,
    # sent again at every live refresh.
    @board.queue.sharded(shards=4, name="bulky", queue="bulky", retries=0)
    async def bulky(shard: int, shards: int, cursor: object) -> None:
        raise ValueError("x" * 100_000)

    for run in ("a", "b"):
        await bulky.start(run)
    await Worker(board.queue, burst=True, poll_interval=0.01, queues=["bulky"]).run()
    page = await client.get("/shards")
    assert page.status_code == 200 and len(page.text) < 50_000
    section = page.text[page.text.index('data-sharded="bulky"') :]
    errors = re.findall(r'<td class="error-cell">(.*?)</td>', section, re.S)
    assert len(errors) == 8
    assert all(e.startswith("ValueError: xxx") and e.endswith("x…") for e in errors), errors[0]
    # The whole error is on the shard's own page, which each shard links to.
    href = "/jobs/" + urllib.parse.quote(bulky.shard_id("b", 3), safe="")
    assert f'<a href="{href}">3</a>' in section
    whole = await client.get(href)
    assert whole.status_code == 200 and "x" * 100_000 in whole.text


async def test_a_store_that_cannot_be_reached_is_a_page_that_names_it() -> None:
    # Every page was a bare "Internal Server Error" (text/plain): no store, no cause.
    from batchy.jobs import Queue
    from batchy_contrib.dashboard import create_app
    from batchy_contrib.jobs.postgres import PostgresBackend

    queue = Queue(PostgresBackend("postgresql://app:s3cret@127.0.0.1:1/jobs", schema="gone"))
    app = create_app(queue, secret_key=SECRET)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://dash") as client:
        for path in ("/", "/jobs", "/dead"):
            page = await client.get(path)
            assert page.status_code == 503 and page.headers["content-type"].startswith("text/html")
            (alert,) = re.findall(r'role="alert">(.*?)</p>', page.text)
            said = htmllib.unescape(alert)
            assert said.startswith(
                "cannot reach PostgreSQL postgresql://app:***@127.0.0.1:1/jobs schema 'gone': "
                'OperationalError: connection failed: connection to server at "127.0.0.1", port 1 '
                "failed: Connection refused"
            )
            assert said.count("cannot reach") == 1  # the store's own line, not wrapped again
            assert said.endswith(
                "points at it (host, port, database, user and password); "
                "this page reloads as it would"
            )
            assert "s3cret" not in page.text
