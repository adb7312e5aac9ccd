"""Where the job stores check the location they are given, before any connection is made.

A DSN of the wrong kind (a Redis URL given to the PostgreSQL store, ``localhost:6379``
with no scheme) otherwise fails deep in the driver on the first enqueue, with a message
that names neither the store nor the form it expects. The messages here show the
location with its password masked: the drivers' own messages quote it whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from batchy.jobs import Backend, ConfigError

if TYPE_CHECKING:
    import redis.asyncio as aioredis

__all__ = ["REDIS_PROTOCOL", "check_postgres_dsn", "redis_client", "redis_from_url", "shown"]

REDIS_FORM = (
    "write redis://host:6379/1 (a database of its own), rediss://host:6379/1 for TLS, or "
    "unix:///path/to/redis.sock?db=1"
)
POSTGRES_FORM = "write postgresql://user@host:5432/dbname, or libpq's 'host=... dbname=...'"


def shown(location: str) -> str:
    """``location`` with its password masked, also when the scheme was left out."""
    # 'app:secret@host' is no URL, so Backend.redact reads it as libpq's key=value.
    return _masked(Backend.redact(location), location)


def _masked(text: str, location: str) -> str:
    """``text`` (a driver's reason, which may quote any part of ``location``) without the
    password ``location`` holds in its user info, whether or not it has a scheme."""
    password = Backend.password_of(location)
    return text if password is None else text.replace(password, "***")


def redis_client(url: str | aioredis.Redis) -> aioredis.Redis:
    """The asyncio client ``url`` is or names; a :class:`ConfigError` if the store cannot use it."""
    if isinstance(url, str):
        return redis_from_url(url)
    # The scripts' replies are read as text: bytes made listings fail in json.dumps
    # ('Object of type bytes is not JSON serializable') and showed ids as b'...'.
    if not url.get_encoder().decode_responses:  # type: ignore[no-untyped-call]
        raise ConfigError(
            f"RedisBackend: the client {url!r} returns bytes; the store reads text. Make it "
            "with decode_responses=True (redis.asyncio.Redis(..., decode_responses=True)), "
            "or give RedisBackend a URL"
        )
    return url


#: The protocol of the store's own clients: RESP2: redis-py 8
#: speaks RESP3 by default, and then no longer checks that a pooled connection is
#: still open before it sends a command (its RESP3 maintenance notifications skip
#: that check), so the first command after Redis restarted failed with "Connection
#: closed by server" though the server was back: an enqueue, a listing. RESP2 is
#: what the store's scripts were written for, and every redis-py since 5.0 speaks it.
#: A URL that names another protocol (``?protocol=3``) still decides.
REDIS_PROTOCOL = 2


def redis_from_url(url: str) -> aioredis.Redis:
    """The asyncio client for ``url``; a :class:`ConfigError` if it is no Redis URL."""
    import redis.asyncio as aioredis  # each store's driver only: its extra installs no other

    try:
        client: aioredis.Redis = aioredis.Redis.from_url(
            url, decode_responses=True, protocol=REDIS_PROTOCOL
        )
    except ValueError as error:
        # redis-py's reason names no URL (it may hold a password), so it is shown as is.
        raise ConfigError(
            f"RedisBackend: {shown(url)!r} is not a Redis URL ({error}); {REDIS_FORM}"
        ) from None
    return client


def check_postgres_dsn(dsn: str) -> None:
    """A :class:`ConfigError` unless libpq can read ``dsn`` as a connection string."""
    import psycopg

    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except (psycopg.ProgrammingError, UnicodeDecodeError) as error:  # %80 decodes to no text
        # libpq's reason quotes the string, or a part of it, password and all.
        reason = _masked(Backend.redact(str(error).strip()), dsn)
        scheme = dsn.partition("://")[0] if "://" in dsn else ""
        if scheme and scheme not in ("postgresql", "postgres"):
            reason = f"a {scheme}:// URL, not postgresql://"
        raise ConfigError(
            f"PostgresBackend: {shown(dsn)!r} is not a PostgreSQL connection string "
            f"({reason}); {POSTGRES_FORM}"
        ) from None
