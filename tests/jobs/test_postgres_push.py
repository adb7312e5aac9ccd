"""The PostgreSQL push's two statements: a job pushed alone is stored as the same job in a batch."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchy.jobs import Envelope
from batchy_contrib.jobs.postgres import PostgresBackend

pytestmark = pytest.mark.timeout(120)

# Few ids, queues, unique and ordering keys: repeats (a duplicate id, a unique key
# taken, a key's second job waiting behind its head) are what the two forms could
# disagree on. Payloads include what text parameters make hard (quotes, braces,
# commas, backslashes, NULL-looking words, non-ASCII).
ENVELOPE = st.builds(
    Envelope,
    id=st.sampled_from(["a", "b", "c", "d", 'e"', "f,g"]),
    queue=st.sampled_from(["default", "mail", "{x}"]),
    payload=st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30
    )
    | st.sampled_from(['{"job":"x"}', "NULL", "a\\b", '"', "{1,2}", "ö€😀"]),
    due=st.none() | st.sampled_from([0.0, 500.0, 10_000.0]),
    unique=st.none() | st.sampled_from(["u1", "u2"]),
    unique_ttl=st.sampled_from([0.0, 60.0]),
    key=st.none() | st.sampled_from(["k1", "k2"]),
)


def _rows(conn: psycopg.Connection[Any], schema: str, t: float) -> dict[str, object]:
    s = f'"{schema}"'
    # Times in tens of seconds from the push: the three stores push a moment apart.
    jobs = conn.execute(
        f"SELECT id, queue, payload, state, okey, round((due - %s) / 10) FROM {s}.jobs "
        "ORDER BY seq",
        (t,),
    ).fetchall()
    uniques = conn.execute(
        f"SELECT key, round((expires - %s) / 10) FROM {s}.uniques ORDER BY key", (t,)
    )
    queues = conn.execute(f"SELECT name FROM {s}.queues ORDER BY name").fetchall()
    return {"jobs": jobs, "uniques": uniques.fetchall(), "queues": queues}


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=st.lists(ENVELOPE, min_size=1, max_size=6))
def test_jobs_pushed_one_by_one_are_stored_as_the_same_jobs_pushed_together(
    postgres_dsn: str, batch: list[Envelope]
) -> None:
    """``push`` of one envelope sends plain values (the server builds the arrays), of more
    sends arrays: stored rows, answers and unique keys agree, for the sync push too."""
    schemas = [f"batchy_test_{uuid.uuid4().hex[:12]}" for _ in range(3)]
    alone, together, sync = (PostgresBackend(postgres_dsn, schema=s) for s in schemas)
    now = time.time()

    async def push() -> tuple[list[bool], list[bool]]:
        try:
            one = [ok for e in batch for ok in await alone.push([e], now)]
            return one, await together.push(batch, now)
        finally:
            await alone.close()
            await together.close()

    try:
        one, many = asyncio.run(push())
        by_sync = [ok for e in batch for ok in sync.push_sync([e], now)]
        assert one == many == by_sync
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            stored = [_rows(conn, s, now) for s in schemas]
        assert stored[0] == stored[1] == stored[2]
        assert [j[0] for j in stored[0]["jobs"]] == list(
            dict.fromkeys(e.id for e, ok in zip(batch, many, strict=True) if ok)
        )
    finally:
        asyncio.run(sync.close())
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            for s in schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{s}" CASCADE')
