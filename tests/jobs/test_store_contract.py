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
