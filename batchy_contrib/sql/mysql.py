"""MySQL / MariaDB loaders over an aiomysql pool: one row per key, all rows per key, your own query.

::

    from batchy_contrib.sql import mysql

    db = mysql.Database.from_url("mysql://root@127.0.0.1:3306/test")  # at import time
    users_by_id = db.one("users")   # SELECT * FROM `users` WHERE `id` IN (...)
    comments_by_post = db.many("comments", "post_id", order_by="id")

:meth:`Database.from_url` connects lazily: one pool per event loop, opened by
the first call in that loop and closed when the loop shuts down
(:mod:`._sql_loops`), so the same module-level loaders serve an ASGI server,
``batchy.run`` per request in Flask or Django, a worker and tests. ``await
connect(url)`` opens one pool now, in the running loop, and only that loop may
use it.

Each batch call takes one connection from the pool for exactly one statement
and gives it back, so a connection is never shared by two coroutines, and the
batches of one round run in parallel on as many connections. A connection that
failed mid-statement (lost server, timeout, cancellation) is closed instead of
going back to the pool, so the pool only ever holds healthy connections.

Parameters are encoded here, one at a time, rather than by aiomysql: so a key
the driver cannot encode is known by itself (and fails alone) before anything
is sent, and ``bytes`` keys work although aiomysql 0.2-0.3 cannot escape them
under PyMySQL 1.2 (it calls a helper PyMySQL replaced with a string).
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import re
import weakref
from collections.abc import Sequence
from typing import Any

from .._extras import extra

with extra(__name__, "'batchy[mysql]'", "aiomysql", "pymysql"):
    import aiomysql
    import pymysql
    from pymysql.constants import FIELD_TYPE, FLAG

from batchy import LoaderError, UsageError, short_repr

from ..errors import (
    ConnectionLostError,
    DataSourceError,
    KeyEncodingError,
    QueryInterruptedError,
    QueryRejectedError,
)
from ._core import CONNECTING, Dialect, KeysRejected, Row, SQLDatabase, identifier
from ._errors import CONTAINERS, Kind, pool_wait_hint, refusal
from ._loops import EventLoopError, PerLoop, foreign_loop, running_loop
from ._match import KeyTypeWarning, Match
from ._mysql_pools import abandon_pool, acquire, close_pool, open_pool, url_options

__all__ = [
    "ConnectionLostError",
    "DataSourceError",
    "Database",
    "EventLoopError",
    "KeyEncodingError",
    "KeyTypeWarning",
    "LoaderError",
    "QueryInterruptedError",
    "QueryRejectedError",
    "connect",
    "identifier",
]


#: Until the first connection says MariaDB: UNION ALL SELECT, which every server parses.
MYSQL = Dialect("mysql", "`", "%s", keys_table="union", in_filter=True)
#: Batched key access for indexed key columns (see _build). A hash join (BNLH) only for
#: text keys against a column whose hash join matches as = does (_unfiltered):
#: MariaDB's hashed join buffers compare some collations byte by byte, so under
#: utf8mb4_bin 'Ada ' missed 'Ada' (PAD SPACE), and a CHAR column under a NO PAD _ci
#: collation lost rows.
MARIADB = Dialect(
    "mariadb",
    "`",
    "%s",
    keys_table="values",
    in_filter=True,
    keyed_prefix="SET STATEMENT join_cache_level=6, optimizer_switch='join_cache_hashed=off' FOR ",
    unfiltered_prefix="SET STATEMENT join_cache_level=6 FOR ",
)

#: What PyMySQL encodes (bytes by us); bool, datetime are subclasses of int, date.
_BINDS = (
    int,
    float,
    str,
    bytes,
    bytearray,
    memoryview,
    decimal.Decimal,
    datetime.date,
    datetime.time,
    datetime.timedelta,
)
_ACCEPTED = "None, int, float, str, bytes, Decimal, date, datetime, time or timedelta"
#: Server errors that mean "stopped", not "wrong": KILL QUERY, MariaDB's
#: max_statement_time, MySQL's max_execution_time.
_KILLED = frozenset({1317, 1969, 3024})
#: "Illegal mix of collations" (for =, for IN's 3 or more): text keys against a
#: column of another charset.
_MIXED_COLLATIONS = frozenset({1267, 1270, 1271})
#: "Invalid utf8mb4 character string": a bytes key a text column cannot read as text.
_INVALID_STRING = 1300
#: The character sets whose text is UTF-8 (utf8mb3 without what needs 4 bytes).
_UTF8 = frozenset({"utf8mb4", "utf8mb3", "utf8"})
_CHARSET_NAME = re.compile(r"[a-z0-9_]{1,32}")
#: Python's codec for what a MySQL charset can hold (None: any text, "bmp": up to
#: U+FFFF). MariaDB's latin1 is cp1252, with its five gaps kept as themselves.
_CODECS: dict[str, str | None] = {
    "utf8mb4": None,
    "utf16": None,
    "utf16le": None,
    "utf32": None,
    "utf8mb3": "bmp",
    "utf8": "bmp",
    "ucs2": "bmp",
    "latin1": "cp1252",
    "ascii": "ascii",
    "latin2": "iso8859_2",
    "latin5": "iso8859_9",
    "latin7": "iso8859_13",
    "greek": "iso8859_7",
    "hebrew": "iso8859_8",
    "cp1250": "cp1250",
    "cp1251": "cp1251",
    "cp1256": "cp1256",
    "cp1257": "cp1257",
    "cp850": "cp850",
    "cp852": "cp852",
    "cp866": "cp866",
    "koi8r": "koi8_r",
    "koi8u": "koi8_u",
    "macroman": "mac_roman",
    "macce": "mac_latin2",
    "tis620": "tis_620",
    "sjis": "shift_jis",
    "cp932": "cp932",
    "ujis": "euc_jp",
    "eucjpms": "euc_jp",
    "euckr": "euc_kr",
    "gbk": "gbk",
    "gb2312": "gb2312",
    "big5": "big5",
}
_LATIN1_GAPS = str.maketrans("", "", "\x81\x8d\x8f\x90\x9d")


class Database(SQLDatabase):
    """Loader factories (:meth:`one`, :meth:`many`, :meth:`query`) over aiomysql pools.

    Make it with :meth:`from_url` (lazy: a pool per event loop, opened on first
    use) or :func:`connect` (a pool opened now, for the running loop only), or
    wrap a pool you made: ``Database(pool)``. The pool must use
    ``autocommit=True`` (both do): otherwise every ``SELECT`` opens a
    transaction, aiomysql closes the connection when it comes back to the
    pool, and later reads see an old snapshot. ``timeout`` (seconds) bounds
    each batch call, connection included: a server that stops answering fails
    the waiting keys with :class:`DataSourceError` instead of hanging them.
    """

    dialect = MYSQL
    kind = "MySQL"
    #: 1,000 keys make a statement of a few kB, far below max_allowed_packet.
    default_batch_size = 1000
    plain_key_types = frozenset({int, str, float, bytes, type(None), decimal.Decimal})
    killed_hint = (
        "it was killed on the server (KILL QUERY) or stopped by a time limit "
        "(max_statement_time). The connection is still good; retry the keys, or find "
        "out what killed the query."
    )
    timeout_hint = (
        "the connection was discarded. Check the server, or raise timeout= if the query is slow."
    )
    connect_hint = pool_wait_hint("maxsize")

    def __init__(self, pool: Any, *, host: str | None = None, timeout: float | None = 10.0) -> None:
        # from_url passes its PerLoop; anything else is one aiomysql pool.
        self._per_loop: PerLoop[Any] | None = pool if isinstance(pool, PerLoop) else None
        self._fixed: Any = None if self._per_loop is not None else pool
        super().__init__(host or _pool_host(self._fixed), timeout=timeout)
        self._shows: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._server_known = False
        self._closed = False

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        minsize: int = 1,
        maxsize: int = 10,
        timeout: float | None = 10.0,
        **pool_options: Any,
    ) -> Database:
        """A database for ``mysql://user:password@host:port/db`` that connects on first use.

        Declare it at import time, with its loaders, in sync or async code::

            db = mysql.Database.from_url("mysql://app@db:3306/app", maxsize=10)
            users_by_id = db.one("users")

        Each event loop that uses it gets its own aiomysql pool (``minsize``,
        ``maxsize`` and ``pool_options`` as in :func:`connect`), opened by the
        first call in that loop and closed when the loop shuts down: the one
        loop of an ASGI server, each ``batchy.run`` of a Flask view, a test's.
        Nothing connects here, so a server that is down fails the first loader
        call (and the next call tries again). So does one that accepts
        connections and never answers: ``connect_timeout`` (``timeout``'s by
        default, or 60 s) bounds the opening, the server's greeting included,
        and each connection the pool makes as it grows.
        """
        host, options = url_options("mysql.Database.from_url()", url, minsize, maxsize, timeout)
        options.update(pool_options)

        async def open_here() -> Any:
            return await open_pool(options)

        pools = PerLoop(f"the MySQL database at {host}", open_here, close_pool, abandon_pool)
        return cls(pools, host=host, timeout=timeout)

    def __repr__(self) -> str:
        return f"<batchy_contrib.sql.mysql.Database {self.host}>"

    @property
    def pool(self) -> Any:
        """The aiomysql pool calls use in the running loop (from_url: None until the first)."""
        if self._per_loop is not None:
            return self._per_loop.current()
        return self._fixed

    async def _pool(self) -> Any:
        """The running loop's pool; from_url opens it on first use, a fixed pool must be at home."""
        if self._per_loop is not None:
            pool = self._per_loop.here()
            return pool if pool is not None else await self._per_loop.open_here()
        pool = self._fixed
        home = getattr(pool, "_loop", None)  # aiomysql keeps the loop it was made in
        if home is not None and home is not running_loop(f"the MySQL database at {self.host}"):
            if home.is_closed():
                # Nobody can close it in its loop any more: free its sockets, or
                # they warn when collected. The pool stays refused.
                abandon_pool(pool)
            raise EventLoopError(foreign_loop(self.host, home, driver="aiomysql", module="mysql"))
        return pool

    async def _key_rows(self, sql: str, keys: list[Any], repeat: int, match: Match) -> list[Row]:
        charset = match.charset_for(keys)
        if charset is not None:
            # Converted to a charset that lacks it, a key would become '?' and find
            # the row '?': it fails alone, as WHERE col = key alone is refused.
            bad: dict[int, BaseException] = {
                i: e for i, k in enumerate(keys) if (e := _unheld(k, charset, match))
            }
            if bad:
                # The column may hold them since its charset was learnt (ALTER TABLE ...
                # CONVERT TO CHARACTER SET utf8mb4): ask the catalog before refusing them.
                learnt = await self._charset(match)
                if learnt != charset:
                    # A charset that holds any text needs no conversion.
                    match.learn_charset(None if _CODECS.get(learnt or "", "") is None else learnt)
                    raise KeysRejected({}, again=True)
                raise KeysRejected(bad, by_server=True)
        fields: dict[str, Any] = {}
        try:
            rows = await self._rows(sql, keys, repeat=repeat, fields=fields)
        except pymysql.err.OperationalError as error:
            code = error.args[0]
            if code == _INVALID_STRING:
                # A bytes key a text column reads as text in its charset, and refuses
                # if it is none (WHERE col = key alone too): that key fails alone.
                learnt = await self._charset(match)
                bad = {i: e for i, k in enumerate(keys) if (e := _no_text(k, learnt, match))}
                if bad:
                    raise KeysRejected(bad, by_server=True) from error
                raise
            # A derived table's text is no literal, so the server will not convert it to
            # a latin1 or ascii column's charset as it does a key alone ("Illegal mix of
            # collations"): learn the column's charset and convert the keys to it.
            if code not in _MIXED_COLLATIONS:
                raise
            learnt = await self._charset(match)
            if learnt is None or learnt == match.charset:
                raise  # nothing new to try
            match.learn_charset(learnt)
            raise KeysRejected({}, again=True) from error
        # Learnt from every result, so an ALTER TABLE is seen at once (and a batch
        # sent unfiltered to a column that is no longer hash-joinable is asked again).
        match.learn_unfiltered(_unfiltered(fields.get(match.key)))
        return rows

    async def _charset(self, match: Match) -> str | None:
        """The key column's character set, from the catalog (None: not found, or binary)."""
        table, column = match.column
        found = await self._rows(
            "SELECT CHARACTER_SET_NAME AS cs FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s AND COLUMN_NAME = %s",
            [table, column],
        )
        name = found[0]["cs"] if found else None
        # Written into the statement: only a plain name (the server's, but still checked).
        return name if isinstance(name, str) and _CHARSET_NAME.fullmatch(name) else None

    async def _rows(
        self,
        sql: str,
        params: Sequence[Any],
        *,
        repeat: int = 1,
        fields: dict[str, Any] | None = None,
    ) -> list[Row]:
        """Run one statement; ``fields`` (if given) gets each column's PyMySQL field: the
        type and flags the server sent for it (None where the driver does not show them)."""
        CONNECTING.set(True)  # a timeout until the connection comes is no slow statement
        pool = await self._pool()
        conn = await acquire(pool)
        CONNECTING.set(False)
        healthy = True  # until a statement is under way
        try:
            if not conn.get_autocommit():
                raise UsageError(
                    f"the aiomysql pool for {self.host} has autocommit off: each SELECT "
                    "would leave a transaction open, so aiomysql closes the connection on "
                    "release and reads see a stale snapshot. Create the pool with "
                    "autocommit=True (batchy_contrib.sql.mysql.connect does)"
                )
            if not self._server_known:
                self._learn_server(conn)
            if params:
                sql = _format(conn, sql, params, repeat)  # may raise KeysRejected
            healthy = False
            async with conn.cursor(aiomysql.DictCursor) as cur:
                await cur.execute(sql)
                rows = await cur.fetchall()
                if fields is not None:
                    # Not in cursor.description (no flags there): the result's own fields.
                    result = getattr(cur, "_result", None)
                    fields.update((f.name, f) for f in getattr(result, "fields", None) or ())
            healthy = True
            return list(rows)
        except pymysql.err.MySQLError as error:
            healthy = _server_answered(error)  # a rejected statement leaves the link in sync
            raise
        finally:
            # Not healthy: lost, timed out or cancelled mid-statement. Its protocol
            # state is unknown, so it must never serve another statement.
            if not healthy:
                conn.close()
            pool.release(conn)

    def _learn_server(self, conn: Any) -> None:
        # MariaDB parses a VALUES list of keys faster than UNION ALL SELECT; MySQL
        # spells it VALUES ROW(...). The handshake already told us which it is.
        if "mariadb" in str(conn.get_server_info()).lower():
            self.dialect = MARIADB
        self._server_known = True

    def _bind_problem(self, key: Any) -> str | None:
        if key is None or (isinstance(key, _BINDS) and not isinstance(key, CONTAINERS)):
            return None
        return refusal(key, _ACCEPTED)

    def _key_kind(self, key: Any) -> object:
        # The SQL type of the key's literal: int, double, decimal, hex (bytes), or a
        # quoted string (str, and dates and times, which PyMySQL writes as strings).
        if isinstance(key, int):
            return int
        if isinstance(key, float):
            return float
        if isinstance(key, decimal.Decimal):
            return decimal.Decimal
        if isinstance(key, (bytes, bytearray, memoryview)):
            return bytes
        return str

    def _classify(self, error: BaseException) -> Kind:
        pool = self.pool
        if self._closed or (isinstance(error, RuntimeError) and pool is not None and pool.closed):
            return "closed"
        if isinstance(error, pymysql.err.MySQLError):
            if not _server_answered(error):
                return "lost"
            return "killed" if error.args[0] in _KILLED else "rejected"
        if isinstance(error, (OSError, EOFError, asyncio.IncompleteReadError)):
            return "lost"
        return "other"

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one write statement; return the number of affected rows."""
        pool = await self._pool()
        conn = await acquire(pool)
        try:
            if params:
                try:
                    sql = _format(conn, sql, params, 1)
                except KeysRejected as rejected:
                    raise next(iter(rejected.bad.values())) from None
            async with conn.cursor() as cur:
                return int(await cur.execute(sql))
        finally:
            pool.release(conn)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """Run one write statement for many parameter rows (one multi-row INSERT); return the
        number of affected rows (0 for no rows, as on PostgreSQL and SQLite)."""
        pool = await self._pool()
        conn = await acquire(pool)
        try:
            async with conn.cursor() as cur:
                # aiomysql returns None, not 0, when there are no rows to send.
                return int(await cur.executemany(sql, [list(r) for r in rows]) or 0)
        finally:
            pool.release(conn)

    async def questions(self) -> int:
        """Statements received so far on this pool's connections, from the server's counters.

        Reads ``SHOW SESSION STATUS LIKE 'Questions'`` on every connection of the
        pool (its own statement not counted). The difference of two calls is the
        number of statements the server received in between, as long as no
        connection was closed meanwhile. Call it while the pool is idle.
        """
        pool = await self._pool()
        if not pool.maxsize:
            raise UsageError(
                f"questions() reads every connection of the pool for {self.host}, so it needs "
                "a bounded pool; create it with maxsize > 0"
            )
        conns = [await acquire(pool) for _ in range(pool.maxsize)]
        total = 0
        try:
            for conn in conns:
                async with conn.cursor() as cur:
                    await cur.execute("SHOW SESSION STATUS LIKE 'Questions'")
                    (_, value) = await cur.fetchone()
                # The server counts every SHOW we sent on this connection, this one too.
                shows = self._shows[conn] = self._shows.get(conn, 0) + 1
                total += int(value) - shows
        finally:
            for conn in conns:
                pool.release(conn)
        return total

    async def close(self) -> None:
        """Close the pool and wait for its connections to close.

        From :meth:`from_url`: close the running loop's pool (each loop's pool
        closes with its loop anyway); the next call opens a new one. From
        :func:`connect`: the database is closed for good.
        """
        if self._per_loop is not None:
            await self._per_loop.close_here()
            return
        self._closed = True
        self._fixed.close()
        await self._fixed.wait_closed()


def _format(conn: Any, sql: str, params: Sequence[Any], repeat: int) -> str:
    """``sql`` with every parameter as a literal (``repeat`` times over, encoded once).

    :class:`KeysRejected` names the parameters that cannot be encoded.
    """
    literals: list[str] = []
    bad: dict[int, BaseException] = {}
    encoding = conn.encoding
    for i, p in enumerate(params):
        try:
            lit = _literal(conn, p)
            if not lit.isascii():
                lit.encode(encoding)  # aiomysql encodes strictly: lone surrogates fail there
        except Exception as error:
            bad[i] = error
            lit = "NULL"
        literals.append(lit)
    if bad:
        raise KeysRejected(bad)
    try:
        return sql % tuple(literals * repeat)
    except (TypeError, ValueError, KeyError) as error:
        raise UsageError(
            f"the statement {short_repr(sql)} cannot take {len(literals)} parameters "
            f"({type(error).__name__}: {error}): placeholders are %s, and a literal % "
            "is written %%"
        ) from error


def _literal(conn: Any, p: Any) -> str:
    kind = type(p)
    if kind is int:
        return str(p)
    if kind is str:
        return conn.escape(p)  # type: ignore[no-any-return]
    if isinstance(p, (bytes, bytearray, memoryview)):
        return f"X'{bytes(p).hex()}'"  # PyMySQL 1.2's own form; no escaping rules apply
    if isinstance(p, int) and not isinstance(p, bool):
        return str(int(p))  # an IntEnum is its number, not its name
    if isinstance(p, float) and kind is not float:
        p = float(p)
    if isinstance(p, CONTAINERS):  # PyMySQL would write a list "(1,2)", or refuse
        raise TypeError(f"{kind.__name__} can not be used as parameter")
    return conn.escape(p)  # type: ignore[no-any-return]


def _unheld(key: Any, charset: str, match: Match) -> ValueError | None:
    """Why a column of ``charset`` cannot hold the text key ``key``, or None if it can."""
    if type(key) is not str or key.isascii():
        return None
    codec = _CODECS.get(charset, "")
    if codec is None:
        return None
    lacking = ""
    if codec == "bmp":
        lacking = next((c for c in key if ord(c) > 0xFFFF), "")
    elif codec:
        text = key.translate(_LATIN1_GAPS) if charset == "latin1" else key
        try:
            text.encode(codec)
        except UnicodeEncodeError as error:
            lacking = error.object[error.start]
    else:
        return ValueError(
            f"the column {'.'.join(match.column)} is in character set {charset}, which "
            "batchy cannot check text against, so its non-ASCII keys are not sent (a key "
            "it lacks would be compared as '?'); convert the column to utf8mb4"
        )
    if not lacking:
        return None
    return ValueError(
        f"the column {'.'.join(match.column)} is in character set {charset}, which has no "
        f"{lacking!r} (WHERE {match.key} = key alone is refused, or finds nothing); convert "
        "the column to utf8mb4 to hold any text"
    )


def _no_text(key: Any, charset: str | None, match: Match) -> ValueError | None:
    """Why a column of ``charset`` cannot read the bytes key ``key`` as text, or None if it can.

    Only the UTF-8 character sets refuse bytes (latin1 and ascii columns read
    any). MariaDB 10.11 and Python's decoder agreed on 3,000 random strings of
    1 to 3 bytes and on the edge cases (overlong forms, past U+10FFFF); the
    server takes encoded surrogates, as ``surrogatepass`` does.
    """
    if not isinstance(key, (bytes, bytearray, memoryview)) or charset not in _UTF8:
        return None
    try:
        text = bytes(key).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        pass
    else:
        if charset == "utf8mb4" or all(ord(c) <= 0xFFFF for c in text):
            return None
    return ValueError(
        f"the column {'.'.join(match.column)} is in character set {charset}, and the key is "
        f"no text in it (WHERE {match.key} = key alone is refused: Invalid {charset} character "
        f"string); pass the key as text (str), or bytes that are {charset} text"
    )


def _unfiltered(field: Any) -> bool | None:
    """How MariaDB matches text keys to this result column as ``=`` alone does: None
    with the IN filter, True without it and hash joins allowed, False without it and
    hash joins off.

    The field's collation id is no help: the server reports the result's
    character set (utf8mb4_general_ci), not the column's. Its type and BINARY
    flag (set exactly for ``_bin`` collations and binary strings) are. Checked
    on MariaDB 10.11 against ``WHERE col = key`` for every key alone (trailing
    spaces, case, accents, expansions, keys longer than the column): a
    ``VARCHAR`` under any of 173 collations not ending in ``_bin`` matched the
    same rows hash-joined; under ``_bin`` (PAD SPACE) ``'Ada '`` missed ``'Ada'``.
    A ``CHAR`` under a NO PAD ``_ci`` collation lost rows hash-joined, and the
    flags do not tell NO PAD, so ``CHAR`` (and ``ENUM``, ``UUID``, sent as the
    same type) is never hash-joined; nor filtered, since its index is read with
    the key padded to the column's length, so under NO PAD ``'straße'`` finds
    ``'straße'`` and not ``'strasse'``, and ``IN ('STRASSE', 'straße')`` only
    ``'strasse'``: each key must be looked up alone (see :mod:`._build`).
    """
    if field is None:
        return None  # unknown: keep the filter, and hash joins off
    if field.type_code == FIELD_TYPE.STRING:
        return False
    if field.type_code == FIELD_TYPE.VAR_STRING and not field.flags & FLAG.BINARY:
        return True
    return None


def _server_answered(error: BaseException) -> bool:
    # Server error codes are 1000-1999 and 3000+ (MariaDB 4000+); 2000-2999 are the
    # client's own (can't connect, lost connection), 0 is a broken protocol state.
    code = error.args[0] if error.args and isinstance(error.args[0], int) else 0
    return 1000 <= code < 2000 or code >= 3000


def _pool_host(pool: Any) -> str:
    kwargs = getattr(pool, "_conn_kwargs", None) or {}
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', 3306)}"


async def connect(
    url: str,
    *,
    minsize: int = 1,
    maxsize: int = 10,
    timeout: float | None = 10.0,
    **pool_options: Any,
) -> Database:
    """A :class:`Database` over a new aiomysql pool for ``mysql://user:password@host:port/db``.

    The pool uses ``autocommit=True``; ``pool_options`` go to
    :func:`aiomysql.create_pool`; ``connect_timeout`` (``timeout``'s by
    default, or 60 s) bounds making the ``minsize`` first connections, and
    each the pool makes as it grows, the server's greeting included. With
    ``minsize=0`` no connection is opened until the first query, so a server
    that is down fails the first loader call instead of this one. The pool
    belongs to the running event loop: a call from any other loop fails with
    :class:`EventLoopError`. For a database declared at import time and used
    from any loop (``batchy.run`` per request), use :meth:`Database.from_url`.
    """
    host, options = url_options("mysql.connect()", url, minsize, maxsize, timeout)
    options.update(pool_options)
    try:
        pool = await open_pool(options)
    except (pymysql.err.MySQLError, OSError) as error:
        error.add_note(f"batchy_contrib.sql.mysql.connect() could not reach {host}")
        raise
    return Database(pool, host=host, timeout=timeout)
