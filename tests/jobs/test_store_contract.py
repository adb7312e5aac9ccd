"""Corners of the store contract where stores disagreed, each found by ``test_store_model``
(or by a review) and kept here as the smallest example, run on every store."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

import pytest

from batchy.jobs import Backend, Envelope, Outcome, TextError, WorkerInfo

pytestmark = pytest.mark.timeout(60)

WAITING = ("queued", "scheduled", "retrying")


async def test_info_lists_a_queue_whose_jobs_all_wait_behind_their_keys(backend: Backend) -> None:
    # The memory store listed only queues that had a ready job once: a queue
    # whose every job waited behind a head in another queue was missing.
    now = time.time()
    await backend.push([Envelope("head", "a", "p1", key="k")], now)
    await backend.push([Envelope("next", "b", "p2", key="k")], now)
    info = await backend.info(now)
    assert [(q.name, q.size, q.running, q.scheduled, q.retrying) for q in info.queues] == [
        ("a", 1, 0, 0, 0),
        ("b", 0, 0, 0, 0),
    ]


@pytest.mark.parametrize("calls", ["one call", "a call each"])
async def test_an_envelope_that_is_skipped_takes_nothing(backend: Backend, calls: str) -> None:
    # SQLite and PostgreSQL took the unique key of an envelope skipped for its
    # live id, so the next enqueue under that key, of another id, was skipped
    # too; and they listed the skipped envelope's queue.
    now = time.time()
    assert await backend.push([Envelope("job", "a", "p1")], now) == [True]
    again = Envelope("job", "elsewhere", "p2", unique="once", unique_ttl=60.0)
    other = Envelope("other", "a", "p3", unique="once", unique_ttl=60.0)
    if calls == "one call":
        assert await backend.push([again, other], now) == [False, True]
    else:
        assert await backend.push([again], now) == [False]
        assert await backend.push([other], now) == [True]
    assert [q.name for q in (await backend.info(now)).queues] == ["a"]
    assert (await backend.status("other", now)).state == "queued"
    # The key is taken now, by the envelope that was stored.
    third = Envelope("third", "a", "p4", unique="once", unique_ttl=60.0)
    assert await backend.push([third], now) == [False]


async def test_a_job_whose_time_came_is_queued_before_any_worker_looks(backend: Backend) -> None:
    # Redis said scheduled (or retrying) for a delayed job (or a retry) whose time
    # had come, in status, info, the listings and to the actions, until a
    # worker's cycle moved it to its queue; the other stores said queued.
    now = time.time()
    await backend.push([Envelope("again", "a", "p1"), Envelope("later", "a", "p2", now + 0.2)], now)
    (claim,) = await backend.cycle([], ["a"], 1, "w", 30.0, now)
    retry = Outcome("again", "retry", "a", "p3", now + 0.2, token=claim.token)
    assert await backend.cycle([retry], ["a"], 0, "w", 30.0, now) == []
    assert (await backend.status("again", now)).state == "retrying"
    await asyncio.sleep(0.3)
    now = time.time()
    assert [(await backend.status(i, now)).state for i in ("again", "later")] == ["queued"] * 2
    (queue,) = (await backend.info(now)).queues
    assert (queue.size, queue.scheduled, queue.retrying) == (2, 0, 0)
    listed = {s: {j.id for j in (await backend.list_jobs(s, now))[0]} for s in WAITING}
    assert listed == {"queued": {"again", "later"}, "scheduled": set(), "retrying": set()}
    assert await backend.act("run_now", ["later"], now) == {"later": "queued"}


async def test_a_delayed_job_behind_its_keys_head_is_scheduled(backend: Backend) -> None:
    # Redis said queued for it; the other stores scheduled, as its time is ahead.
    now = time.time()
    head, later = (
        Envelope("head", "a", "p1", key="k"),
        Envelope("next", "a", "p2", now + 60, key="k"),
    )
    await backend.push([head, later], now)
    assert (await backend.status("next", now)).state == "scheduled"
    record = await backend.job("next", now)
    assert record is not None and record.state == "blocked"


async def test_an_action_refused_for_a_done_job_says_done(backend: Backend) -> None:
    # Memory, SQLite and PostgreSQL said "unknown" for a job done with its result
    # kept (Redis said "done"); the contract asks for the state the job is in.
    now = time.time()
    await backend.push([Envelope("job", "a", "p")], now)
    (claim,) = await backend.cycle([], ["a"], 1, "w", 30.0, now)
    done = Outcome("job", "done", "a", result="42", keep=60.0, token=claim.token)
    await backend.cycle([done], ["a"], 0, "w", 30.0, now)
    for action in ("cancel", "delete", "run_now", "retry_dead"):
        assert await backend.act(action, ["job", "nobody"], now) == {
            "job": "done",
            "nobody": "unknown",
        }


async def test_deleting_a_keys_head_and_next_job_at_once_leaves_nothing(backend: Backend) -> None:
    # Redis made the next job the head as the head went, then deleted it as the
    # blocked job it had been: its id stayed in its queue's list, counted by info
    # and dropped by the next claim with a warning about evicted jobs.
    now = time.time()
    await backend.push(
        [Envelope("head", "a", "p1", key="k"), Envelope("next", "a", "p2", key="k")], now
    )
    assert await backend.act("delete", ["head", "next"], now) == {}
    (queue,) = (await backend.info(now)).queues
    assert (queue.size, queue.scheduled) == (0, 0)
    assert await backend.cycle([], ["a"], 5, "w", 30.0, now) == []
    assert getattr(backend, "dropped", 0) == 0


async def test_a_cancel_ends_with_its_claim_when_the_lease_runs_out(backend: Backend) -> None:
    # The memory store reported the cancel to the worker in the cycle that gave
    # the expired lease back (and claimed the job anew): the claim it was for had
    # ended. The others end the request with the claim, as the contract says.
    now = time.time()
    await backend.push([Envelope("job", "a", "p")], now)
    (claim,) = await backend.cycle([], ["a"], 1, "w", 0.1, now)
    assert await backend.act("cancel", ["job"], now) == {}
    await asyncio.sleep(0.2)
    claims = await backend.cycle([], ["a"], 1, "w", 30.0, time.time())
    assert [c.id for c in claims] == ["job"] and claims[0].token != claim.token
    assert claims.cancel == []


async def claimed_twice(backend: Backend, now: float) -> tuple[str, str]:
    """The tokens of job ``job``'s ended claim and of its live one (released, claimed anew)."""
    await backend.push([Envelope("job", "a", "p1")], now)
    (first,) = await backend.cycle([], ["a"], 1, "w", 30.0, now)
    release = Outcome("job", "release", token=first.token)
    (second,) = await backend.cycle([release], ["a"], 1, "w", 30.0, now)
    assert second.token != first.token
    return first.token, second.token


@pytest.mark.parametrize("live_first", [True, False], ids=["live first", "ended first"])
async def test_two_outcomes_for_one_job_are_answered_claim_by_claim(
    backend: Backend, live_first: bool
) -> None:
    # SQLite kept the result of the last done outcome of the job, the ended
    # claim's too; SQLite and PostgreSQL refused neither (they compared ids).
    now = time.time()
    ended, live = await claimed_twice(backend, now)
    outcomes = [
        Outcome("job", "done", "a", result='"live"', keep=60.0, token=live),
        Outcome("job", "done", "a", result='"ended"', keep=60.0, token=ended),
    ]
    claims = await backend.cycle(outcomes[:: 1 if live_first else -1], ["a"], 0, "w", 30.0, now)
    assert claims.refused == ["job"]
    status = await backend.status("job", now)
    assert (status.state, status.result) == ("done", '"live"')


async def test_a_heartbeat_answers_each_claim_of_a_job(backend: Backend) -> None:
    # SQLite and PostgreSQL renewed by id: the ended claim beside the live one
    # was not said lost.
    now = time.time()
    ended, live = await claimed_twice(backend, now)
    info = WorkerInfo("w", "host", 1, ("a",), 3)
    assert await backend.heartbeat(info, [("job", live), ("job", ended)], 30.0, now) == ["job"]
    assert await backend.heartbeat(info, [("job", live)], 30.0, now) == []


@pytest.mark.parametrize("key", [None, "k"])
async def test_a_death_without_a_payload_keeps_the_claimed_one(
    backend: Backend, key: str | None
) -> None:
    # SQLite kept the payload the job was claimed with; memory, Redis and
    # PostgreSQL stored '', so the dead job, retried, could not be decoded.
    now = time.time()
    await backend.push([Envelope("job", "a", "p1", key=key)], now)
    (claim,) = await backend.cycle([], ["a"], 1, "w", 30.0, now)
    dead = Outcome("job", "dead", "a", reason="why \u2713 \U0001f642", token=claim.token)
    await backend.cycle([dead], ["a"], 0, "w", 30.0, now)
    got = [(d.id, d.payload, d.reason, d.key) for d in await backend.dead_jobs()]
    assert got == [("job", "p1", "why \u2713 \U0001f642", key)]
    assert await backend.retry_dead(["job"], now) == 1
    (again,) = await backend.cycle([], ["a"], 1, "w", 30.0, now)
    assert (again.id, again.payload) == ("job", "p1")


@pytest.mark.parametrize("field", ["key", "unique"])
async def test_an_empty_key_is_refused_on_every_store(backend: Backend, field: str) -> None:
    # Redis stored a job pushed with key='' unordered (with unique='': not
    # deduplicated); the other stores kept it under the key ''.
    now = time.time()
    envelope = replace(Envelope("job", "a", "p", unique_ttl=60.0), **{field: ""})
    name = "ordering key" if field == "key" else "unique key"
    with pytest.raises(TextError, match=f"^job job: its {name} is '' \\(empty\\)"):
        await backend.push([envelope], now)
    assert (await backend.status("job", now)).state == "unknown"


Call = Callable[[Backend, str, float], Awaitable[object]]
LOOKUPS: dict[str, Call] = {
    "status": lambda b, text, now: b.status(text, now),
    "statuses": lambda b, text, now: b.statuses(["fine", text], now),
    "job": lambda b, text, now: b.job(text, now),
    "jobs": lambda b, text, now: b.jobs(["fine", text], now),
    "act": lambda b, text, now: b.act("delete", [text], now),
    "retry_dead": lambda b, text, now: b.retry_dead([text], now),
    "delete_dead": lambda b, text, now: b.delete_dead([text]),
    "list_jobs queue": lambda b, text, now: b.list_jobs("queued", now, queue=text),
    "list_jobs key": lambda b, text, now: b.list_jobs("queued", now, key=text),
    "note_run": lambda b, text, now: b.note_run("job", text, now, 60.0),
    "runs": lambda b, text, now: b.runs(text, now, 60.0),
    "run_started": lambda b, text, now: b.run_started("job", text),
}
NO_JOBS_TEXT = pytest.mark.parametrize("text", ["a\x00b", "a\udc80b"], ids=["NUL", "surrogate"])


@NO_JOBS_TEXT
async def test_text_no_job_can_have_gets_a_text_error_from_every_store(
    backend: Backend, text: str
) -> None:
    # Asked directly (not through Queue or Admin), memory answered "unknown",
    # PostgreSQL raised psycopg's DataError for a NUL, and the stores that encode
    # text a UnicodeEncodeError for a lone surrogate.
    now = time.time()
    for name, call in LOOKUPS.items():
        with pytest.raises(TextError, match="so no store holds a job with it") as info:
            await call(backend, text, now)
        # (A store may answer one through another: job through jobs, say.)
        message = str(info.value)
        assert message.startswith(f"{type(backend).__name__}.{name.split()[0]}"), name
        assert f"({text!r}): the " in message, name
    with pytest.raises(TextError, match="the queue holds"):
        await backend.cycle([], ["a", text], 1, "w", 30.0, now)


@NO_JOBS_TEXT
async def test_a_workers_word_for_text_no_job_can_have_is_refused(
    backend: Backend, text: str
) -> None:
    # As for any claim that does not hold, and the rest of the round trip lands
    # (stores failed the whole call with their own errors, or refused).
    now = time.time()
    await backend.push([Envelope("job", "a", "p")], now)
    (claim,) = await backend.cycle([], ["a"], 1, "w", 30.0, now)
    info = WorkerInfo("w", "host", 1, ("a",), 3)
    held = [(text, claim.token), ("job", text), ("job", claim.token)]
    assert sorted(await backend.heartbeat(info, held, 30.0, now)) == sorted([text, "job"])
    assert not await backend.save_progress(text, claim.token, "p2", 30.0, now)
    assert not await backend.save_progress("job", text, "p2", 30.0, now)
    outcomes = [
        Outcome(text, "done", "a", token=claim.token),
        Outcome("job", "done", "a", result='"r"', keep=60.0, token=claim.token),
    ]
    claims = await backend.cycle(outcomes, ["a"], 0, "w", 30.0, now)
    assert claims.refused == [text]
    assert (await backend.status("job", now)).result == '"r"'


@NO_JOBS_TEXT
async def test_a_progress_save_of_text_no_store_keeps_gets_a_text_error(
    backend: Backend, text: str
) -> None:
    # Memory saved it, SQLite and Redis saved a NUL, PostgreSQL raised psycopg's
    # DataError for a NUL, and the others a UnicodeEncodeError for a lone surrogate.
    now = time.time()
    await backend.push([Envelope("job", "a", "p")], now)
    (claim,) = await backend.cycle([], ["a"], 1, "w", 30.0, now)
    with pytest.raises(TextError) as info:
        await backend.save_progress("job", claim.token, f"p{text}", 30.0, now)
    assert str(info.value).startswith(
        f"{type(backend).__name__}.save_progress('job'): the payload {f'p{text}'!r} holds "
    ), str(info.value)
    assert "nothing was asked of the store; save a payload without them" in str(info.value)
    record = await backend.job("job", now)
    assert record is not None and record.payload == "p"
    assert await backend.save_progress("job", claim.token, "p2", 30.0, now)


@NO_JOBS_TEXT
async def test_a_worker_id_no_store_keeps_gets_a_text_error(backend: Backend, text: str) -> None:
    # SQLite and Redis kept a NUL that PostgreSQL refused (DataError); a lone
    # surrogate failed all but memory with a UnicodeEncodeError.
    now = time.time()
    name = type(backend).__name__
    with pytest.raises(TextError, match=rf"^{name}\.cycle: the worker id .* holds "):
        await backend.cycle([], ["a"], 1, f"w{text}", 30.0, now)
    info = WorkerInfo(f"w{text}", "host", 1, ("a",), 3)
    with pytest.raises(TextError, match=rf"^{name}\.heartbeat: the worker id .* holds "):
        await backend.heartbeat(info, [], 30.0, now)
    assert (await backend.info(now)).workers == ()


@NO_JOBS_TEXT
async def test_an_outcomes_payload_no_store_keeps_fails_its_job_only(
    backend: Backend, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A serializer that writes text as it is (json.dumps(ensure_ascii=False)) put
    # an error message's lone surrogate in the payload of a retry or a death:
    # SQLite, Redis and PostgreSQL failed the worker's whole round trip with it,
    # again on every try, so the worker's other jobs never finished either.
    now = time.time()
    await backend.push([Envelope(i, "a", f"p-{i}") for i in ("retried", "dead", "done")], now)
    claims = {c.id: c.token for c in await backend.cycle([], ["a"], 3, "w", 30.0, now)}
    outcomes = [
        Outcome("retried", "retry", "a", f"p{text}", now + 60, token=claims["retried"]),
        Outcome("dead", "dead", "a", f"p{text}", reason="boom", token=claims["dead"]),
        Outcome("done", "done", "a", result='"r"', keep=60.0, token=claims["done"]),
    ]
    assert await backend.cycle(outcomes, ["a"], 0, "w", 30.0, now) == []
    assert (await backend.status("done", now)).result == '"r"'
    dead = {d.id: d for d in await backend.dead_jobs()}
    assert {i: d.payload for i, d in dead.items()} == {"retried": "p-retried", "dead": "p-dead"}
    assert dead["dead"].reason == "boom"
    assert dead["retried"].reason.startswith(f"job retried: its retry payload {f'p{text}'!r} ")
    assert "the store keeps the payload it was claimed with" in dead["retried"].reason
    assert f"job dead: its dead payload {f'p{text}'!r} holds" in caplog.text


async def test_a_death_without_a_queue_keeps_the_claimed_one(backend: Backend) -> None:
    # PostgreSQL kept the queue the job was claimed from; memory, SQLite and
    # Redis kept '' (an Outcome's default), so the dead job, retried, went to a
    # queue no worker reads (memory refused it, and lost it from the dead set).
    now = time.time()
    await backend.push([Envelope("job", "a", "p1")], now)
    (claim,) = await backend.cycle([], ["a"], 1, "w", 30.0, now)
    await backend.cycle(
        [Outcome("job", "dead", reason="why", token=claim.token)], [], 0, "w", 30.0, now
    )
    assert [(d.id, d.queue) for d in await backend.dead_jobs()] == [("job", "a")]
    assert await backend.retry_dead(["job"], now) == 1
    (again,) = await backend.cycle([], ["a"], 1, "w", 30.0, now)
    assert (again.id, again.queue, again.payload) == ("job", "a", "p1")
