"""The SQL loaders shared by every SQL backend: the factories, one batch from keys to values.

A backend (:mod:`batchy_contrib.sql.mysql`, :mod:`batchy_contrib.sql.sqlite`,
:mod:`batchy_contrib.sql.postgres`) subclasses :class:`SQLDatabase` and supplies
its :class:`Dialect` (how to quote a name, write a placeholder, list keys with
their positions), ``_rows`` (run one statement and return dicts),
``_bind_problem`` (which keys its driver cannot bind) and ``_classify`` (what
kind of failure an exception is); one that binds the keys otherwise than one
placeholder each (PostgreSQL: one array) overrides ``_key_rows`` too. Everything
users see — ``one``, ``many``, ``query`` and their errors — lives here and in
:mod:`._build` (the statements), :mod:`._match` (rows to keys) and
:mod:`._errors` (the messages) once, so the backends cannot drift apart.

Why bad keys are checked here: one key the driver cannot bind (a tuple, a
``Decimal`` on SQLite) would otherwise fail the whole statement, and with it
every other request's keys in the batch. Such a key gets its own
:class:`KeyEncodingError` and is left out of the statement; a key the driver
refuses anyway (``KeysRejected``: nothing was sent) is failed the same way and
the statement sent again without it, so the server still sees one statement.
"""

from __future__ import annotations

import abc
import asyncio
import contextvars
import datetime
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, overload

import batchy
from batchy import LoaderError, UsageError, short_repr

from ..errors import DataSourceError
from ._build import (
    KEYS_MARK,
    Dialect,
    Select,
    identifier,
    keyed_sql,
    plain_sql,
    query_sql,
    repeats,
    select,
)
from ._errors import (
    CONTAINERS,
    KeysRejected,
    Kind,
    bad_key,
    failed,
    timed_out,
    unencodable_key,
    unreadable_key,
)
from ._match import Match, Seen

__all__ = ["CONNECTING", "Dialect", "KeysRejected", "Row", "SQLDatabase", "identifier"]

#: True while a batch call waits for its connection: a backend sets it around
#: taking one, so a timeout says no connection came, not that a statement was slow.
#: A context variable: each batch call runs in a task of its own.
CONNECTING: contextvars.ContextVar[bool] = contextvars.ContextVar("CONNECTING", default=False)

T = TypeVar("T")
Row = dict[str, Any]


class SQLDatabase(abc.ABC):
    """Loader factories over one SQL database; subclassed per backend."""

    dialect: Dialect
    kind: str  # "MySQL", "SQLite": for error messages
    #: Keys per statement when the factory is not told otherwise.
    default_batch_size: int = 500
    #: Key types the driver binds as they are: checked with one set look-up per key.
    plain_key_types: frozenset[type] = frozenset()
    #: The end of the message of a statement that was killed or stopped by a limit.
    killed_hint: str = "retry the keys."
    #: The end of the message of a statement that outran ``timeout``.
    timeout_hint: str = "raise timeout= if the query is slow."
    #: The end of the message of a ``timeout`` that expired before a connection came
    #: (see :data:`CONNECTING`): nothing was sent.
    connect_hint: str = "Check that the database accepts connections, or raise timeout=."
    #: The end of the message of a key the driver could not encode.
    encode_hint: str = (
        "Pass a value the driver can encode: text without lone surrogates, finite numbers, "
        "integers of at most 64 bits on SQLite."
    )

    def __init__(self, host: str, *, timeout: float | None) -> None:
        self.host = host
        self.timeout = timeout
        #: What its key columns were seen to hold (see :mod:`._match`).
        self._seen = Seen()

    # -- what a backend supplies ----------------------------------------------------

    @abc.abstractmethod
    async def _rows(self, sql: str, params: Sequence[Any], *, repeat: int = 1) -> list[Row]:
        """Run one statement with bound ``params``; return its rows as dicts.

        ``repeat``: the statement takes ``params`` that many times over, in order
        (encode them once). Raise :class:`KeysRejected` when the driver cannot
        encode some parameters and nothing was sent.
        """

    async def _key_rows(self, sql: str, keys: list[Any], repeat: int, match: Match) -> list[Row]:
        """Run one loader statement for ``keys``, one placeholder each, ``repeat`` times over
        (see :func:`repeats`); raise :class:`KeysRejected` as ``_rows``. A backend that
        learns what the key column is from the result tells ``match`` here.
        """
        return await self._rows(sql, keys, repeat=repeat)

    def _key_kind(self, key: Any) -> object:
        """The kind of SQL value ``key`` is sent as, where the server types the keys' column
        by the batch (MySQL: one text key makes every key text); None where it does not.

        Keys of different kinds go in statements of their own (see :meth:`_load`).
        """
        return None

    @abc.abstractmethod
    def _bind_problem(self, key: Any) -> str | None:
        """Why the driver cannot bind ``key`` (the accepted types and the fix), or None if it can.

        Called only for keys whose type is not in :attr:`plain_key_types`.
        """

    @abc.abstractmethod
    def _classify(self, error: BaseException) -> Kind:
        """What kind of failure ``error`` is: server gone, statement killed, bad SQL, ..."""

    # -- raw access -----------------------------------------------------------------

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Run one statement with bound ``params`` (the dialect's placeholders); rows as dicts."""
        try:
            return await self._rows(sql, params)
        except KeysRejected as rejected:
            raise next(iter(rejected.bad.values())) from None

    # -- loader factories -----------------------------------------------------------

    @overload
    def one(
        self,
        table: str,
        key: str = "id",
        *,
        columns: Sequence[str] | None = None,
        row: None = None,
        name: str | None = None,
        max_batch_size: int | None = None,
        max_concurrency: int | None = None,
        cache: bool = True,
    ) -> batchy.Loader[Any, Row | None]: ...
    @overload
    def one(
        self,
        table: str,
        key: str = "id",
        *,
        columns: Sequence[str] | None = None,
        row: Callable[..., T],
        name: str | None = None,
        max_batch_size: int | None = None,
        max_concurrency: int | None = None,
        cache: bool = True,
    ) -> batchy.Loader[Any, T | None]: ...
    def one(
        self,
        table: str,
        key: str = "id",
        *,
        columns: Sequence[str] | None = None,
        row: Callable[..., Any] | None = None,
        name: str | None = None,
        max_batch_size: int | None = None,
        max_concurrency: int | None = None,
        cache: bool = True,
    ) -> batchy.Loader[Any, Any]:
        """A loader of the row whose ``key`` column equals the key (``None`` if there is none).

        One statement per round (per chunk of ``max_batch_size`` keys), in which
        the server compares each key with the column as ``WHERE key = ?`` would:
        under the column's collation (``'ADA'`` finds ``'ada'`` in a
        case-insensitive column). A key that matches several rows fails, that
        key only. ``row`` turns each row into your type (``row(**columns)``);
        ``columns`` limits what is selected::

            users_by_id = db.one("users")                 # key column "id"
            user = await users_by_id(7)                   # {"id": 7, "name": ...} or None
        """
        spec = self._select(table, key, columns, None)
        name = name or f"{table}_by_{key}"
        match = Match(name, key, False, row, table=table, seen=self._seen)
        keyed, plain = self._keyed(spec), self._plain(spec)
        return self._loader(match, keyed, plain, row, max_batch_size, max_concurrency, cache)

    @overload
    def many(
        self,
        table: str,
        key: str,
        *,
        columns: Sequence[str] | None = None,
        order_by: str | Sequence[str] | None = None,
        row: None = None,
        name: str | None = None,
        max_batch_size: int | None = None,
        max_concurrency: int | None = None,
        cache: bool = True,
    ) -> batchy.Loader[Any, list[Row]]: ...
    @overload
    def many(
        self,
        table: str,
        key: str,
        *,
        columns: Sequence[str] | None = None,
        order_by: str | Sequence[str] | None = None,
        row: Callable[..., T],
        name: str | None = None,
        max_batch_size: int | None = None,
        max_concurrency: int | None = None,
        cache: bool = True,
    ) -> batchy.Loader[Any, list[T]]: ...
    def many(
        self,
        table: str,
        key: str,
        *,
        columns: Sequence[str] | None = None,
        order_by: str | Sequence[str] | None = None,
        row: Callable[..., Any] | None = None,
        name: str | None = None,
        max_batch_size: int | None = None,
        max_concurrency: int | None = None,
        cache: bool = True,
    ) -> batchy.Loader[Any, list[Any]]:
        """A loader of every row whose ``key`` column equals the key (``[]`` if none).

        Equal as the server compares them, like :meth:`one`. ``order_by`` orders
        the rows of each key (``"-id"`` for descending)::

            comments_by_post = db.many("comments", "post_id", order_by="id")
            comments = await comments_by_post(1)          # [{"id": 3, ...}, ...]
        """
        spec = self._select(table, key, columns, order_by)
        name = name or f"{table}_by_{key}"
        match = Match(name, key, True, row, table=table, seen=self._seen)
        keyed, plain = self._keyed(spec), self._plain(spec)
        return self._loader(match, keyed, plain, row, max_batch_size, max_concurrency, cache)

    def query(
        self,
        sql: str,
        *,
        key: str,
        many: bool = False,
        row: Callable[..., Any] | None = None,
        name: str | None = None,
        max_batch_size: int | None = None,
        max_concurrency: int | None = None,
        cache: bool = True,
    ) -> batchy.Loader[Any, Any]:
        """A loader over your own statement; ``{keys}`` in it becomes the bound ``IN`` list.

        (On PostgreSQL, ``= ANY(%s)`` with the keys as one array.) Each result
        row must have a column named ``key`` holding the key it belongs to;
        rows are matched to keys by Python ``==`` on that column (batchy cannot
        rewrite your SQL to let the server say), so pass keys that equal the
        column's values in Python. ``many=False``: one row (or ``None``) per
        key; ``many=True``: a list per key::

            comment_counts = db.query(
                "SELECT post_id, COUNT(*) AS n FROM comments"
                " WHERE post_id IN {keys} GROUP BY post_id",
                key="post_id",
            )
        """
        if not isinstance(sql, str) or sql.count(KEYS_MARK) != 1:
            raise UsageError(
                f"db.query() needs a statement with exactly one {KEYS_MARK} where the "
                f"bound key list goes, got {short_repr(sql)}. Example: "
                f"'SELECT post_id, COUNT(*) AS n FROM comments WHERE post_id IN {KEYS_MARK} "
                "GROUP BY post_id'"
            )
        if not isinstance(key, str) or not key:
            raise UsageError(
                f"db.query() needs key= naming the result column that holds each row's key, "
                f"got {short_repr(key)}"
            )
        name = name or f"query_by_{key}"
        match = Match(name, key, many, row)

        def statement(n: int) -> str:
            return query_sql(sql, n, self.dialect)

        return self._loader(match, None, statement, row, max_batch_size, max_concurrency, cache)

    # -- building -------------------------------------------------------------------

    def _select(
        self,
        table: str,
        key: str,
        columns: Sequence[str] | None,
        order_by: str | Sequence[str] | None,
    ) -> Select:
        return select(self.dialect, table, key, columns, order_by)

    def _keyed(self, spec: Select) -> Callable[[int, bool | None, str | None], str]:
        def statement(n: int, unfiltered: bool | None, charset: str | None) -> str:
            # self.dialect is read per batch: MySQL learns MariaDB's faster form later.
            filtered = unfiltered is None
            return keyed_sql(spec, n, self.dialect, filtered, charset, hashed=bool(unfiltered))

        return statement

    def _plain(self, spec: Select) -> Callable[[int], str]:
        def statement(n: int) -> str:
            return plain_sql(spec, n, self.dialect)

        return statement

    def _loader(
        self,
        match: Match,
        keyed: Callable[[int, bool | None, str | None], str] | None,
        plain: Callable[[int], str],
        row: Callable[..., Any] | None,
        max_batch_size: int | None,
        max_concurrency: int | None,
        cache: bool,
    ) -> batchy.Loader[Any, Any]:
        name = match.name
        if row is not None and not callable(row):
            raise UsageError(
                f"loader {name!r}: row= must be a type or function called as row(**columns), "
                f"got {short_repr(row)}"
            )

        async def load(keys: list[Any]) -> list[Any]:
            return await self._load(match, keyed, plain, keys)

        # batchy.Loader(fn, ...) rather than batchy.batched(fn, ...): the latter's
        # overloads do not type the function-plus-options form.
        return batchy.Loader(
            load,
            name=name,
            max_batch_size=max_batch_size or self.default_batch_size,
            max_concurrency=max_concurrency,
            cache=cache,
            # query() matches rows to keys by Python's ==, so its keys are too.
            key=None if keyed is None else _as_sent,
        )

    async def _load(
        self,
        match: Match,
        keyed: Callable[[int, bool | None, str | None], str] | None,
        plain: Callable[[int], str],
        keys: list[Any],
    ) -> list[Any]:
        """One batch: one statement per kind of key (usually one), each key's value in order.

        Why kinds: MySQL types the derived table of keys by all its rows, so in
        ``[0, 'ada']`` the key 0 became the text '0' and compared as text with a
        text column, where ``WHERE name = 0`` alone compares as numbers (and
        ``1.5`` beside a big int made the int a double). A key's rows must not
        depend on the other keys of its batch, so each kind goes alone. ``timeout=``
        bounds the batch call, not each statement: the kinds share one deadline.
        """
        timeout = self.timeout
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        groups = self._kinds(keys) if keyed is not None else None
        if groups is None:
            return await self._load_kind(match, keyed, plain, keys, deadline)
        out: list[Any] = [None] * len(keys)
        for group in groups:
            try:
                kind = [keys[i] for i in group]
                values = await self._load_kind(match, keyed, plain, kind, deadline)
            except DataSourceError as error:  # this kind's statement failed: its keys only
                values = [error] * len(group)
            for i, value in zip(group, values, strict=True):
                out[i] = value
        return out

    def _kinds(self, keys: list[Any]) -> list[list[int]] | None:
        """The keys' positions grouped by :meth:`_key_kind`, or None if they are of one kind."""
        # A key's kind follows its type: one key of each type tells (a batch of
        # 10,000 keys costs a dict comprehension, not 10,000 calls of _key_kind).
        typed = {type(k): k for k in keys}
        typed.pop(type(None), None)
        kinds = {t: self._key_kind(k) for t, k in typed.items()}
        if len(set(kinds.values())) <= 1:
            return None  # the usual batch: one kind, one statement
        groups: dict[object, list[int]] = {}
        nulls: list[int] = []
        for i, k in enumerate(keys):
            if k is None:  # NULL matches nothing, whatever its neighbours
                nulls.append(i)
            else:
                groups.setdefault(kinds[type(k)], []).append(i)
        if nulls:
            next(iter(groups.values())).extend(nulls)
        return list(groups.values())

    async def _load_kind(
        self,
        match: Match,
        keyed: Callable[[int, bool | None, str | None], str] | None,
        plain: Callable[[int], str],
        keys: list[Any],
        deadline: float | None,
    ) -> list[Any]:
        """Keys of one kind: those the driver cannot bind fail alone, the rest go in one
        statement."""
        name = match.name
        alone: dict[int, object] = {}  # index in keys -> that key's own error, or _ABSENT
        binds = self.plain_key_types
        for i, k in enumerate(keys):
            if type(k) not in binds and (problem := self._bind_problem(k)) is not None:
                alone[i] = bad_key(self, name, k, problem)
        sent = [i for i in range(len(keys)) if i not in alone] if alone else list(range(len(keys)))
        batch = keys
        rows: list[Row] = []
        sql = ""
        positional = False
        how: bool | None = None  # None: the IN filter beside the positions (see _build)
        CONNECTING.set(False)
        try:
            async with asyncio.timeout_at(deadline):
                while sent:
                    if len(sent) < len(keys):
                        batch = [keys[i] for i in sent]
                    # Positions cost a join and a column; an int key against a column
                    # seen to hold ints compares the same in Python, so skip them.
                    positional = keyed is not None and not match.exact_in_python(batch)
                    repeat = 1
                    if keyed is not None and positional:
                        # Text keys need no IN filter where the dialect has that form
                        # and the column was reported as taking them so (see _build).
                        d = self.dialect
                        how = None if d.unfiltered_prefix is None else match.unfiltered(batch)
                        sql = keyed(len(batch), how, match.charset_for(batch))
                        repeat = repeats(d, how is None)
                    else:
                        sql = plain(len(batch))
                    try:
                        rows = await self._key_rows(sql, batch, repeat, match)
                    except KeysRejected as rejected:
                        if not rejected.bad and not rejected.again:
                            raise
                        # Nothing came back: fail those keys alone and send the rest.
                        why = unreadable_key if rejected.by_server else unencodable_key
                        for j, error in rejected.bad.items():
                            if j in rejected.absent:
                                alone[sent[j]] = _ABSENT
                            else:
                                alone[sent[j]] = why(self, name, batch[j], error)
                        sent = [i for j, i in enumerate(sent) if j not in rejected.bad]
                        continue
                    if positional and _ask_again(how, match.unfiltered(batch), self.dialect):
                        continue
                    if positional or keyed is None or match.still_ints(rows):
                        break
                    # The column no longer holds ints (ALTER TABLE): ask again, with positions.
        except TimeoutError as error:
            failure: BaseException = timed_out(self, name, batch, connecting=CONNECTING.get())
            failure.__cause__ = error
        except (UsageError, LoaderError):
            raise
        except Exception as error:
            failure = failed(self, self._classify(error), name, batch, sql, error)
            failure.__cause__ = error
        else:
            values = match.values(batch, rows, positional) if sent else []
            if not alone:
                return values
            out: list[Any] = [None] * len(keys)
            for i, value in zip(sent, values, strict=True):
                out[i] = value
            for i, bad in alone.items():
                out[i] = _own(match, bad)
            return out
        if not alone:
            raise failure
        return [_own(match, alone[i]) if i in alone else failure for i in range(len(keys))]


#: Key types whose == holds only between values the server reads alike.
_SAME_AS_SENT = frozenset({int, str, bytes, uuid.UUID, datetime.date})
_TYPED = object()  # (no key of the caller's holds it: a tuple key is refused anyway)


def _as_sent(key: Any) -> Any:
    """The cache key of a one() or many() key: keys share a value only if they are sent alike.

    The engine merges keys that are equal in Python, in a batch and in the
    scope's cache; but ``1``, ``1.0``, ``True`` and ``Decimal("1.00")`` are
    equal there and go to the server as four texts, which a text column tells
    apart (so do equal instants in two time zones, against a column without
    one): the first key asked would answer for the others. So beyond the
    types above, a key is told apart by its type and ``repr``.
    """
    kind = type(key)
    if kind in _SAME_AS_SENT or key is None or isinstance(key, CONTAINERS):
        return key  # (a container fails as the key it is: see _bind_problem)
    return (_TYPED, kind, repr(key))


#: A key the column cannot hold (see KeysRejected.absent): it has no row.
_ABSENT = object()


def _own(match: Match, outcome: object) -> object:
    """What a key left out of the statement gets: its own error, or no row."""
    if outcome is _ABSENT:
        return [] if match.many else None
    return outcome


def _ask_again(sent: bool | None, seen: bool | None, d: Dialect) -> bool:
    """After a batch of keys went with positions: does its own result say the column
    takes its keys another way than they were sent (:meth:`Match.unfiltered`), one that
    could have missed rows? Sent hash-joined to a column now reported otherwise (ALTER
    TABLE since the last batch), or filtered to a CHAR column, whose IN filter can lose
    rows (its first batch): asked again its way. Other changes only cost time."""
    if sent:
        return seen is not True
    return sent is None and seen is False and d.unfiltered_prefix is not None
