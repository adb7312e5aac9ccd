"""Redis listings paged while the store changes under them: no job that stays listed is missed.

Each property pages through one listing with a small page size, changing the
store between pages as workers and operators do (heads finished, jobs deleted,
pushed, run now), and checks that every job in the listed state from the first
page to the last appeared on some page. What is in the state is read from the
store's own structures after every change, not from the listing under test.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchy.jobs import Backend, Envelope, Queue

from .conftest import REDIS_DB

pytestmark = pytest.mark.timeout(120)

#: A store change between two pages: (what, which key, which of its jobs).
CHANGES = st.lists(
    st.tuples(st.sampled_from(["finish", "drop", "push"]), st.integers(0, 7), st.integers(0, 99)),
    min_size=1,
    max_size=6,
)


def payload(job: str) -> str:
    return json.dumps({"job": job, "args": [], "kwargs": {}, "attempt": 0, "enqueued_at": 0.0})


@pytest.fixture
async def store(redis_server: tuple[str, int]) -> AsyncIterator[Any]:
    from batchy_contrib.jobs.redis import RedisBackend

    host, port = redis_server
    backend = RedisBackend(
        f"redis://{host}:{port}/{REDIS_DB}", prefix=f"rlist:{uuid.uuid4().hex[:8]}:"
    )
    yield backend
    await backend.close()


async def clear(backend: Any) -> None:
    keys = [k async for k in backend.redis.scan_iter(match=backend.prefix + "*", count=1000)]
    for i in range(0, len(keys), 1000):
        await backend.redis.delete(*keys[i : i + 1000])


async def blocked_now(backend: Any) -> set[str]:
    """The keyed jobs that are not their key's head, from ``okey`` and the keys' lists."""
    r, p = backend.redis, backend.prefix
    heads = {}
    out = set()
    for job_id, key in (await r.hgetall(p + "okey")).items():
        if key not in heads:
            heads[key] = await r.lindex(p + "k:" + key, 0)
        if heads[key] != job_id:
            out.add(job_id)
    return out


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    jobs=st.one_of(st.integers(2, 120), st.integers(520, 900)),
    keys=st.integers(1, 8),
    limit=st.integers(1, 25),
    budget=st.sampled_from([10, 60, 500]),
    by_type=st.booleans(),
    changes=st.lists(CHANGES, min_size=1, max_size=8),
)
async def test_paging_blocked_jobs_while_heads_finish_misses_none(
    store: Any,
    jobs: int,
    keys: int,
    limit: int,
    budget: int,
    by_type: bool,
    changes: list[list[tuple[str, int, int]]],
) -> None:
    """Blocked jobs are HSCAN's on a store of many keyed jobs: a page read again
    after deletions was resumed by its place in a batch that had become another
    one, and jobs blocked throughout were never listed (21 of 2,000 in one run).
    Through the store, and through the Admin API's filter by job type, which cuts
    pages after the jobs the store gives cursors to."""
    store.page_budget = budget
    queue = Queue(store)
    lines: dict[str, list[str]] = {f"k{i}": [] for i in range(keys)}
    envelopes = []
    for i in range(jobs):
        key = f"k{i % keys}"
        lines[key].append(f"j{i}")
        envelopes.append(Envelope(f"j{i}", "default", payload("x"), key=key))
    try:
        for start in range(0, jobs, 500):
            await store.push(envelopes[start : start + 500], time.time())
        stayed = await blocked_now(store)
        listed: list[str] = []
        after, page_no, new = None, 0, 0
        while True:
            if by_type:
                page = await queue.admin.jobs("blocked", job="x", after=after, limit=limit)
                found, after = [j.id for j in page.jobs], page.next
            else:
                rows, after = await store.list_jobs(
                    "blocked", time.time(), after=after, limit=limit
                )
                found = [j.id for j in rows]
                assert {j.state for j in rows} <= {"blocked"}
            listed += found
            if after is None:
                break
            for what, k, n in changes[page_no % len(changes)]:
                line = lines.get(f"k{k % keys}", [])
                if what == "finish" and line:
                    assert await store.act("delete", [line.pop(0)], time.time()) == {}
                elif what == "drop" and len(line) > 1:
                    gone = line.pop(1 + n % (len(line) - 1))
                    assert await store.act("delete", [gone], time.time()) == {}
                elif what == "push":
                    new += 1
                    key = f"k{k % keys}"
                    lines[key].append(f"new{new}")
                    envelope = Envelope(f"new{new}", "default", payload("x"), key=key)
                    await store.push([envelope], time.time())
            stayed &= await blocked_now(store)
            page_no += 1
            assert page_no < 5 * jobs + 10, "the listing does not end"
        assert stayed - set(listed) == set()
    finally:
        await clear(store)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    state=st.sampled_from(["scheduled", "dead"]),
    groups=st.lists(st.integers(1, 40), min_size=1, max_size=4),
    limit=st.integers(1, 8),
    budget=st.sampled_from([2, 5, 500]),
    changes=st.lists(
        st.lists(st.tuples(st.sampled_from(["cursor", "listed", "any"]), st.integers(0, 999))),
        min_size=1,
        max_size=6,
    ),
)
async def test_paging_a_sorted_set_while_its_jobs_leave_misses_none(
    store: Any,
    state: str,
    groups: list[int],
    limit: int,
    budget: int,
    changes: list[list[tuple[str, int]]],
) -> None:
    """Delayed and dead jobs page by (score, id). A cursor whose job left went on
    from its score past a count of the jobs it had passed over there: when some
    of those left as well, as many unlisted jobs of that score were skipped (jobs
    enqueued together are due at one time). Each group here shares a score."""
    store.page_budget = budget
    r, p = store.redis, store.prefix
    ids: list[str] = []
    now = time.time()
    for g, size in enumerate(groups):
        group = [f"g{g}j{i:02d}" for i in range(size)]
        ids += group
        if state == "scheduled":  # one push: one due time
            pushed = [Envelope(i, "default", payload("x"), due=now + 3600 + g) for i in group]
            await store.push(pushed, now)
        else:
            info = {"queue": "default", "payload": payload("x"), "reason": "r", "traceback": ""}
            await r.zadd(p + "dead", dict.fromkeys(group, now - g))
            await r.hset(p + "deadinfo", mapping=dict.fromkeys(group, json.dumps(info)))
    zset = p + ("sched" if state == "scheduled" else "dead")
    try:
        stayed = set(await r.zrange(zset, 0, -1))
        listed: list[str] = []
        after, page_no = None, 0
        while True:
            rows, after = await store.list_jobs(state, time.time(), after=after, limit=limit)
            listed += [j.id for j in rows]
            if after is None:
                break
            # Jobs leave from anywhere: the cursor's own, the ones already listed.
            for which, n in changes[page_no % len(changes)]:
                left = await r.zrange(zset, 0, -1)
                among = {"cursor": listed[-1:], "listed": listed, "any": left}[which]
                gone = among[n % len(among)] if among else ""
                if gone in left:
                    if state == "scheduled":
                        assert await store.act("delete", [gone], time.time()) == {}
                    else:
                        await store.delete_dead([gone])
            stayed &= set(await r.zrange(zset, 0, -1))
            page_no += 1
            assert page_no < 10 * len(ids) + 10, "the listing does not end"
        assert stayed - set(listed) == set()
        assert len(listed) == len(set(listed))
    finally:
        await clear(store)


async def keyed(store: Any, jobs: int) -> set[str]:
    """``jobs`` jobs on two keys, numbered ids; returns the blocked ones."""
    envelopes = [
        Envelope(f"{i:04d}", "default", payload("x"), key=f"k{i % 2}") for i in range(jobs)
    ]
    await store.push(envelopes, time.time())
    return {e.id for e in envelopes[2:]}


async def test_a_blocked_cursor_of_the_earlier_release_misses_none(store: Any) -> None:
    """Cursors of blocked jobs held an HSCAN cursor and a place in its batch; read
    as the greatest id listed, the place ('11') skipped every job whose id sorts
    before it. Such a cursor resumes at its batch's start now."""
    try:
        blocked = await keyed(store, 200)
        # What the earlier release gave as `next` after 11 jobs of the first batch.
        after: str | None = Backend.make_cursor("blocked", ["0", "11", ""])
        listed: list[str] = []
        while after is not None:
            rows, after = await store.list_jobs("blocked", time.time(), after=after, limit=10)
            listed += [j.id for j in rows]
        assert blocked - set(listed) == set()
    finally:
        await clear(store)


async def test_a_page_of_blocked_jobs_in_a_small_hash_holds_at_most_limit(store: Any) -> None:
    """Redis keeps a small hash as a listpack, which every HSCAN returns whole
    whatever its COUNT: past page_budget keyed jobs, a page of 3 held 98."""
    store.page_budget = 10  # (120 keyed jobs: a listpack under Redis's defaults)
    try:
        blocked = await keyed(store, 120)
        assert await store.redis.object("encoding", store.prefix + "okey") in (
            "listpack",
            "ziplist",
        )
        listed: list[str] = []
        after: str | None = None
        while True:
            rows, after = await store.list_jobs("blocked", time.time(), after=after, limit=3)
            assert len(rows) <= 3
            listed += [j.id for j in rows]
            if after is None:
                break
        assert sorted(listed) == sorted(blocked)
    finally:
        await clear(store)


async def test_a_page_filtered_by_job_type_ends_at_the_first_cursor_past_limit(
    store: Any,
) -> None:
    """A page of blocked jobs filtered by type ended only at a job of that type that
    had a cursor: on a store past its page_budget, a page of 1 held 145 jobs."""
    store.page_budget = 200
    try:
        envelopes = [
            Envelope(f"{i:05d}", "default", payload("x" if i % 10 == 0 else "y"), key=f"k{i % 2}")
            for i in range(5000)
        ]
        for i in range(0, len(envelopes), 1000):
            await store.push(envelopes[i : i + 1000], time.time())
        admin = Queue(store).admin
        listed: list[str] = []
        after: str | None = None
        while True:
            page = await admin.jobs("blocked", job="x", limit=1, after=after)
            assert len(page.jobs) <= 40
            listed += [j.id for j in page.jobs]
            if page.next is None:
                break
            after = page.next
        assert sorted(listed) == [e.id for e in envelopes[2:] if e.id.endswith("0")]
    finally:
        await clear(store)
