"""Corners of the store contract where stores disagreed, each found by ``test_store_model``
and kept here as the smallest example, run on every store."""

from __future__ import annotations

import time

import pytest

from batchy.jobs import Backend, Envelope

pytestmark = pytest.mark.timeout(60)


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
