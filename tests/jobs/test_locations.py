"""A job store given a location of the wrong kind says so when it is made, password masked."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batchy.jobs import Backend, ConfigError, Queue
from batchy_contrib.jobs.postgres import PostgresBackend
from batchy_contrib.jobs.redis import RedisBackend

REDIS_FORM = (
    "write redis://host:6379/1 (a database of its own), rediss://host:6379/1 for TLS, or "
    "unix:///path/to/redis.sock?db=1"
)
POSTGRES_FORM = "write postgresql://user@host:5432/dbname, or libpq's 'host=... dbname=...'"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # It was redis-py's ValueError on the first enqueue, naming no store.
        ("localhost:6379", "'localhost:6379'"),
        ("postgresql://app:s3cret@db/app", "'postgresql://app:***@db/app'"),
    ],
)
def test_redis_store_refuses_another_url(url: str, shown: str) -> None:
    with pytest.raises(ConfigError) as info:
        RedisBackend(url)
    assert str(info.value) == (
        f"RedisBackend: {shown} is not a Redis URL (Redis URL must specify one of the "
        f"following schemes (redis://, rediss://, unix://)); {REDIS_FORM}"
    )


@pytest.mark.parametrize(
    ("dsn", "reason"),
    [
        # It was psycopg's 'missing "=" after "redis://:s3cret@..."', password and all.
        ("redis://:s3cret@cache:6379/1", "'redis://:***@cache:6379/1' is not a PostgreSQL "
         "connection string (a redis:// URL, not postgresql://)"),
        ("app", "'app' is not a PostgreSQL connection string (missing \"=\" after \"app\" "
         "in connection info string)"),
        ("postgresql://app:s3cret@[db", "'postgresql://app:***@[db' is not a PostgreSQL "
         "connection string (end of string reached when looking for matching \"]\" in IPv6 "
         "host address in URI: \"postgresql://app:***@[db\")"),
    ],
)  # fmt: skip
def test_postgres_store_refuses_what_libpq_cannot_read(dsn: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        PostgresBackend(dsn)
    assert str(info.value) == f"PostgresBackend: {reason}; {POSTGRES_FORM}"


@pytest.mark.parametrize(
    ("url", "fix"),
    [
        # Each was sqlite3's bare 'unable to open database file', naming nothing.
        ("redis://:s3cret@cache:6379/1", "; for Redis, pass the store: from batchy_contrib.jobs."
         "redis import RedisBackend, then Queue(RedisBackend('redis://:***@cache:6379/1')) "
         "(pip install 'batchy[redis]')"),
        ("postgresql://app:s3cret@db/app", "; for PostgreSQL, pass the store: from batchy_contrib"
         ".jobs.postgres import PostgresBackend, then Queue(PostgresBackend("
         "'postgresql://app:***@db/app')) (pip install 'batchy[postgres]')"),
        ("sqlite:///jobs.db", "; write the file's path: Queue('jobs.db')"),
        ("mysql://app@db/app", "; write a SQLite file's path (Queue('jobs.db')), or pass a "
         "store: RedisBackend(url) or PostgresBackend(url) from batchy_contrib.jobs"),
    ],
)  # fmt: skip
def test_a_queue_given_a_url_names_the_store_to_pass(url: str, fix: str) -> None:
    with pytest.raises(ConfigError) as info:
        Queue(url)
    shown = Backend.redact(url)
    assert str(info.value) == (
        f"Queue({shown!r}): a string is the path of a SQLite file, not a URL{fix}"
    )


def test_good_locations_make_no_connection() -> None:
    # Made, not connected: nothing listens on these ports.
    RedisBackend("redis://127.0.0.1:1/0")
    PostgresBackend("postgresql://app@127.0.0.1:1/app")
    PostgresBackend("host=127.0.0.1 port=1 dbname=app")


PASSWORD = st.text(
    st.characters(codec="ascii", exclude_characters="\x00"), min_size=1, max_size=12
).map(lambda s: f"S3cr{s}")


@given(
    PASSWORD,
    st.sampled_from(["redis", "rediss", "postgresql", "postgres", "mysql", ""]),
    st.sampled_from(["", "[", ":port", "/db?x=1", " garbage"]),
)
def test_no_refused_location_shows_its_password(password: str, scheme: str, tail: str) -> None:
    word = password.translate(str.maketrans("", "", " \t\n\r\x0b\x0c'\\"))
    locations = [
        f"{scheme}://app:{password}@host{tail}" if scheme else f"app:{password}@host{tail}",
        f"host=h password={word}{tail}",  # libpq's key=value form
    ]
    for url in locations:
        for store in (RedisBackend, PostgresBackend):
            try:
                store(url)
            except ConfigError as error:
                secret = password if url is locations[0] else word
                assert secret not in str(error), (store.__name__, url, str(error))
    if scheme:  # a URL: Queue(str) refuses it (anything else would be a SQLite file made here)
        with pytest.raises(ConfigError) as info:
            Queue(locations[0])
        assert password not in str(info.value), (locations[0], str(info.value))


def test_redis_store_refuses_a_client_that_returns_bytes() -> None:
    """A redis.asyncio client made without decode_responses=True was taken: its
    listings failed in json.dumps ('Object of type bytes ...'), ids showed as b'...'."""
    import redis.asyncio as aioredis

    with pytest.raises(ConfigError) as info:
        RedisBackend(aioredis.Redis(host="cache", db=1))
    assert "returns bytes; the store reads text. Make it with decode_responses=True" in str(
        info.value
    )
    RedisBackend(aioredis.Redis(host="cache", db=1, decode_responses=True))  # taken


def test_redis_store_given_a_client_says_why_it_cannot_enqueue_without_a_loop() -> None:
    """push_sync (enqueue from code without an event loop) on a redis.asyncio client
    failed deep in redis-py: 'ConnectionError: no running event loop'."""
    import redis.asyncio as aioredis

    from batchy.jobs import Envelope

    store = RedisBackend(aioredis.Redis(host="cache", db=1, decode_responses=True))
    with pytest.raises(ConfigError) as info:
        store.push_sync([Envelope("j1", "default", "{}")], 0.0)
    assert str(info.value).startswith(f"{store!r} cannot enqueue without an event loop: it was")
    assert "give RedisBackend a URL" in str(info.value)
