"""Looking up text no job can have, on every store: each store answers alike.

Enqueue refuses a job id, queue or ordering key with a NUL character or a lone
surrogate on every store (``TextError``), so no job has one. Asked about one,
PostgreSQL raised psycopg's DataError (its text holds no NUL), SQLite, Redis and
PostgreSQL a UnicodeEncodeError (a lone surrogate is no UTF-8), and the memory
store said "unknown": the same call on the same text ended four ways. The
operator's API (``queue.admin``, which the command line and the dashboard use),
``queue.handle`` and sharded runs now refuse such text before asking the store,
naming it; any other text is an id like any unknown one.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchy.jobs import Envelope, JobNotFound, Outcome, Queue, ShardedJob, TextError
from batchy.jobs._screen import text_problem

pytestmark = pytest.mark.timeout(120)

NUL, SURROGATE = "a\x00b", "caf\udce9"
NUL_SAYS = "holds a NUL character (\\x00)"
SURROGATE_SAYS = "holds a lone surrogate ('\\udce9' at position 3)"
SO = "so no store holds a job with it (enqueue refuses such text on every store)"


def sharded(queue: Queue) -> ShardedJob:
    if "walk" not in queue.sharded_jobs:

        @queue.sharded(shards=2, name="walk")
        async def walk(shard: int, shards: int, cursor: object) -> None:
            return None

    return queue.sharded_jobs["walk"]


def lookups(queue: Queue) -> dict[str, Callable[[str], Awaitable[Any]]]:
    """Every call that takes a job id (or text job ids hold), by name."""
    admin, walk = queue.admin, sharded(queue)
    return {
        "handle": lambda i: queue.handle(i).status(),
        "job": admin.job,
        "delete": admin.delete,
        "run_now": admin.run_now,
        "cancel": lambda i: admin.cancel([i]),
        "retry_dead": lambda i: admin.retry_dead([i]),
        "delete_dead": admin.delete_dead,
        "queue.retry_dead": lambda i: queue.retry_dead([i]),
        "queue filter": lambda i: admin.jobs("queued", queue=i),
        "dead queue filter": lambda i: admin.retry_dead(queue=i),
        "key filter": lambda i: admin.jobs("blocked", key=i),
        "run": walk.status,
        "shards": lambda i: admin.shards(walk, i),
        "start": walk.start,
    }


async def answer(call: Callable[[str], Awaitable[Any]], text: str) -> tuple[str, str]:
    """What a call answered, without the store's name: what every store must agree on."""
    try:
        found = await call(text)
    except TextError as error:
        return "TextError", str(error)
    except JobNotFound:
        return "JobNotFound", ""
    if isinstance(found, list) and found and hasattr(found[0], "state"):
        return "states", ",".join(sorted({s.state for s in found}))
    if hasattr(found, "jobs"):
        return "page", str(len(found.jobs))
    return type(found).__name__, str(getattr(found, "state", found))


async def test_each_lookup_of_text_no_job_can_have_is_refused_naming_it(queue: Queue) -> None:
    said = {
        name: [await answer(call, t) for t in (NUL, SURROGATE)]
        for name, call in lookups(queue).items()
    }
    for name, answers in said.items():
        assert [kind for kind, _ in answers] == ["TextError"] * 2, (name, answers)
    assert said["handle"][0][1] == (
        f"queue.handle('a\\x00b'): the job id {NUL_SAYS}, {SO}; pass the id that enqueue's "
        "handle had (handle.id)"
    )
    assert said["job"][1][1] == (
        f"admin.job('caf\\udce9'): the job id {SURROGATE_SAYS}, which is not text UTF-8 can "
        f"encode (bytes decoded with errors='surrogateescape'?), {SO}; check the id "
        "(`batchy jobs list`, `batchy dead list`)"
    )
    assert said["delete"][0][1] == (
        f"admin.delete('a\\x00b'): the job id {NUL_SAYS}, {SO}; nothing was deleted; check "
        "the ids (`batchy jobs list`)"
    )
    assert said["retry_dead"][0][1].startswith("admin.retry_dead('a\\x00b'): the job id")
    assert said["retry_dead"][0][1].endswith(
        "nothing was retried; check the ids (`batchy dead list`)"
    )
    assert said["queue.retry_dead"] == said["retry_dead"]
    assert said["queue filter"][0][1] == (
        f"admin.jobs('queued', queue='a\\x00b'): the queue {NUL_SAYS}, {SO}; take it out of "
        "the filter"
    )
    assert said["dead queue filter"][0][1].startswith("admin.jobs('dead', queue='a\\x00b')")
    assert said["key filter"][1][1].startswith(
        f"admin.jobs('blocked', key='caf\\udce9'): the ordering key {SURROGATE_SAYS}"
    )
    assert said["run"][0][1] == (
        f"sharded job 'walk' run 'a\\x00b': the run name {NUL_SAYS}, {SO}; name runs with "
        "text a job id can hold"
    )
    assert said["shards"] == said["start"] == said["run"]
    # Nothing was asked of the store, and nothing changed in it.
    assert await queue.admin.runs("walk") == []
    assert (await queue.info()).queues == ()


async def test_an_id_that_is_not_text_is_refused_alike(queue: Queue) -> None:
    admin, walk = queue.admin, sharded(queue)
    for call in (admin.job(42), admin.delete([42]), admin.run_now([42]), admin.retry_dead([42])):  # type: ignore[arg-type,list-item]
        kind, said = await answer(lambda _: call, "")
        assert kind == "TextError" and "the job id is a int, not a str" in said, said
    kind, said = await answer(walk.status, 2024)  # type: ignore[arg-type]
    assert kind == "TextError" and "the run name is a int, not a str" in said, said


# Text as callers pass it: short or long (a PostgreSQL index holds about 2,700 bytes),
# of what breaks encoders (NUL, lone surrogates of both halves, astral characters,
# quotes, backslashes, line breaks, escapes written out) and anything else.
_PIECES = ["\x00", "\udce9", "\ud800", "\udfff", "é", "😀", "\\", '"', "'", "\n", ":", "u0000"]
TEXT = st.one_of(
    st.just(""),
    st.lists(st.sampled_from(_PIECES) | st.characters(codec=None), min_size=1, max_size=12).map(
        "".join
    ),
    st.builds(
        lambda c, n: c * n, st.sampled_from(["k", "é", "😀", "\x00"]), st.integers(900, 3000)
    ),
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=TEXT)
async def test_every_store_answers_every_lookup_of_any_text_alike(queue: Queue, text: str) -> None:
    # What a store answers is what text_problem says of the text, whatever the store:
    # the same TextError for text no job can have, else "not there" as for any unknown id.
    # Jobs in the store (queued, blocked behind a key, dead) that no filter may match.
    # (Pushed again each example: a push skips the ids it holds. start() is left out:
    # a start of any other text changes the store.)
    now = time.time()
    await queue.backend.push([Envelope(f"k{i}", "default", "{}", key="job:k") for i in (1, 2)], now)
    await queue.backend.push([Envelope("gone", "gone", "{}")], now)
    for claim in await queue.backend.cycle([], ["gone"], 1, "w", 60.0, now):
        dead = Outcome(claim.id, "dead", "gone", reason="no", token=claim.token)
        await queue.backend.cycle([dead], [], 0, "w", 60.0, now)
    problem = text_problem(text)
    for name, call in lookups(queue).items():
        if name == "start":
            continue
        kind, said = await answer(call, text)
        if problem is not None:
            assert kind == "TextError" and problem in said, (name, kind, said)
        elif name in ("queue filter", "key filter"):
            assert (kind, said) == ("page", "0"), (name, kind, said)
        elif name in ("run", "shards"):
            assert (kind, said) == ("states", "unknown"), (name, kind, said)
        elif name == "handle":
            assert (kind, said) == ("JobStatus", "unknown"), (kind, said)
        elif name == "dead queue filter":
            assert (kind, said) == ("int", "0"), (kind, said)
        else:
            assert kind == "JobNotFound", (name, kind, said)
    await queue.backend.push([Envelope("probe", "default", "{}")], time.time())
    assert (await queue.admin.job("probe")).state == "queued"  # the store still answers
    await queue.admin.delete("probe")
