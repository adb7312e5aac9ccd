"""The SQL loaders shared by every SQL backend: validated names, bound ``IN`` lists, rows to values.

A backend (:mod:`batchy_contrib.mysql`, :mod:`batchy_contrib.sqlite`) subclasses
:class:`SQLDatabase` and supplies three things: its :class:`Dialect` (how to
quote a name, how to write a placeholder), ``_rows`` (run one statement and
return dicts) and ``_connection_lost`` (tell a lost server from a bad query).
Everything users see — ``one``, ``many``, ``query`` and their errors — lives
here once, so the backends cannot drift apart.

Why names are validated and never quoted-and-pasted: a table or column name
cannot be a bound parameter, and escaping rules differ between servers and
modes (``ANSI_QUOTES``). A strict allow-list (letters, digits, underscore) is
the only rule that is safe everywhere. Keys are always bound parameters.
"""

from __future__ import annotations

import abc
import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import batchy
from batchy import LoaderError, UsageError, short_repr

from ._source import DataSourceError

__all__ = ["Dialect", "Row", "SQLDatabase", "identifier"]

T = TypeVar("T")
Row = dict[str, Any]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
KEYS_MARK = "{keys}"


def identifier(name: object, what: str) -> str:
    """Return ``name`` if it is a plain SQL identifier, else raise :class:`batchy.UsageError`."""
    if isinstance(name, str) and _NAME.fullmatch(name):
        return name
    raise UsageError(
        f"{what} {short_repr(name)} is not a plain SQL identifier. Table and column names "
        "cannot be bound parameters, so batchy accepts only letters, digits and "
        "underscores (at most 64, not starting with a digit) and never pastes other "
        "text into SQL. Rename the table or column, or write the statement yourself "
        "with db.query(...), where keys are still bound parameters."
    )


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one SQL flavour quotes a (validated) name and writes a placeholder."""

    name: str
    quote: str  # the identifier quote character
    param: str  # the placeholder of one bound parameter

    def q(self, name: str) -> str:
        return f"{self.quote}{name}{self.quote}"

    def params(self, n: int) -> str:
        """``(p, p, ..., p)``: an ``IN`` list of ``n`` placeholders."""
        return "(" + ", ".join([self.param] * n) + ")"


def _order(dialect: Dialect, order_by: str | Sequence[str] | None) -> str:
    if order_by is None:
        return ""
    items = [order_by] if isinstance(order_by, str) else list(order_by)
    parts = []
    for item in items:
        desc = isinstance(item, str) and item.startswith("-")
        col = identifier(item[1:] if desc else item, "order_by column")
        parts.append(dialect.q(col) + (" DESC" if desc else ""))
    return " ORDER BY " + ", ".join(parts) if parts else ""


class SQLDatabase(abc.ABC):
    """Loader factories over one SQL database; subclassed per backend."""

    dialect: Dialect
    kind: str  # "MySQL", "SQLite": for error messages
    #: Keys per statement when the factory is not told otherwise.
    default_batch_size: int = 500

    def __init__(self, host: str, *, timeout: float | None) -> None:
        self.host = host
        self.timeout = timeout

    # -- what a backend supplies ----------------------------------------------------

    @abc.abstractmethod
    async def _rows(self, sql: str, params: Sequence[Any]) -> list[Row]:
        """Run one statement with bound ``params``; return its rows as dicts."""

    @abc.abstractmethod
    def _connection_lost(self, error: BaseException) -> bool:
        """True if ``error`` means the server is gone (rather than a bad statement)."""

    # -- raw access -----------------------------------------------------------------

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Run one statement with bound ``params`` (the dialect's placeholders); rows as dicts."""
        return await self._rows(sql, params)

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

        One ``SELECT ... FROM table WHERE key IN (...)`` per round (per chunk of
        ``max_batch_size`` keys). ``row`` turns each row into your type
        (``row(**columns)``); ``columns`` limits what is selected::

            users_by_id = db.one("users")                 # key column "id"
            user = await users_by_id(7)                   # {"id": 7, "name": ...} or None
        """
        sql = self._select(table, key, columns, None)
        name = name or f"{table}_by_{key}"
        return self._loader(name, sql, key, False, row, max_batch_size, max_concurrency, cache)

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

        ``order_by`` orders the rows of each key (``"-id"`` for descending)::

            comments_by_post = db.many("comments", "post_id", order_by="id")
            comments = await comments_by_post(1)          # [{"id": 3, ...}, ...]
        """
        sql = self._select(table, key, columns, order_by)
        name = name or f"{table}_by_{key}"
        return self._loader(name, sql, key, True, row, max_batch_size, max_concurrency, cache)

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

        Each result row must have a column named ``key`` holding the key it
        belongs to. ``many=False``: one row (or ``None``) per key; ``many=True``:
        a list per key::

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
        return self._loader(name, sql, key, many, row, max_batch_size, max_concurrency, cache)

    # -- building -------------------------------------------------------------------

    def _select(
        self,
        table: str,
        key: str,
        columns: Sequence[str] | None,
        order_by: str | Sequence[str] | None,
    ) -> str:
        d = self.dialect
        table = identifier(table, "table")
        key = identifier(key, "key column")
        if columns is None:
            cols = "*"
        else:
            if isinstance(columns, str):
                raise UsageError(
                    f"columns= takes a list of column names, got the string {columns!r}; "
                    f"write columns=[{columns!r}]"
                )
            names = [identifier(c, "column") for c in columns]
            if key not in names:
                names.append(key)  # the rows are matched to keys by this column
            cols = ", ".join(d.q(c) for c in names)
        return f"SELECT {cols} FROM {d.q(table)} WHERE {d.q(key)} IN {KEYS_MARK}" + _order(
            d, order_by
        )

    def _loader(
        self,
        name: str,
        template: str,
        key: str,
        many: bool,
        row: Callable[..., Any] | None,
        max_batch_size: int | None,
        max_concurrency: int | None,
        cache: bool,
    ) -> batchy.Loader[Any, Any]:
        if row is not None and not callable(row):
            raise UsageError(
                f"loader {name!r}: row= must be a type or function called as row(**columns), "
                f"got {short_repr(row)}"
            )

        async def load(keys: list[Any]) -> list[Any]:
            sql = template.replace(KEYS_MARK, self.dialect.params(len(keys)))
            rows = await self._rows_for(name, keys, sql)
            return _shape(name, keys, rows, key, many, row)

        # batchy.Loader(fn, ...) rather than batchy.batched(fn, ...): the latter's
        # overloads do not type the function-plus-options form.
        return batchy.Loader(
            load,
            name=name,
            max_batch_size=max_batch_size or self.default_batch_size,
            max_concurrency=max_concurrency,
            cache=cache,
        )

    async def _rows_for(self, name: str, keys: list[Any], sql: str) -> list[Row]:
        """Run a loader's statement; turn any failure into a :class:`DataSourceError`."""
        try:
            return await _within(self.timeout, self._rows(sql, keys))
        except TimeoutError as error:
            raise DataSourceError(
                f"loader {name!r} got no answer from {self.kind} at {self.host} within "
                f"{self.timeout} s while loading keys {short_repr(keys)}; the connection was "
                "discarded. Check the server, or raise timeout= if the query is slow.",
                loader=name,
                keys=keys,
                host=self.host,
            ) from error
        except (UsageError, LoaderError):
            raise
        except Exception as error:
            if self._connection_lost(error):
                what = f"cannot reach {self.kind} at {self.host} ({type(error).__name__}: {error})"
                hint = "Check that the server is running and reachable; the next call reconnects."
            else:
                what = f"had its query rejected by {self.kind} at {self.host} " + (
                    f"({type(error).__name__}: {error})"
                )
                hint = f"Check the table and column names. SQL: {short_repr(sql)}"
            raise DataSourceError(
                f"loader {name!r} {what} while loading keys {short_repr(keys)}. {hint}",
                loader=name,
                keys=keys,
                host=self.host,
            ) from error


async def _within(timeout: float | None, aw: Awaitable[list[Row]]) -> list[Row]:
    if timeout is None:
        return await aw
    async with asyncio.timeout(timeout):
        return await aw


def _shape(
    name: str,
    keys: list[Any],
    rows: list[Row],
    key: str,
    many: bool,
    row: Callable[..., Any] | None,
) -> list[Any]:
    """Match rows to keys by their ``key`` column: one value (or list) per key, in key order."""
    if rows and key not in rows[0]:
        raise LoaderError(
            f"loader {name!r}: the query's rows have no column {key!r} to match them to "
            f"keys (columns: {sorted(rows[0])}); select it, or pass key= naming it",
            loader=name,
            keys=keys,
        )
    grouped: dict[Any, list[Any]] = {}
    for r in rows:
        value = _build(name, keys, r, row) if row is not None else r
        grouped.setdefault(r[key], []).append(value)
    if many:
        return [grouped.get(k, []) for k in keys]
    out: list[Any] = []
    for k in keys:
        found = grouped.get(k)
        if found is None:
            out.append(None)
        elif len(found) == 1:
            out.append(found[0])
        else:  # fail this key only: the others are fine
            out.append(
                LoaderError(
                    f"loader {name!r} expects at most one row per key but got {len(found)} "
                    f"rows for key {short_repr(k)}; the {key!r} column is not unique. Use "
                    "db.many(...) (or query(..., many=True)) to get a list per key.",
                    loader=name,
                    keys=[k],
                )
            )
    return out


def _build(name: str, keys: list[Any], r: Row, row: Callable[..., Any]) -> Any:
    try:
        return row(**r)
    except TypeError as error:
        raise LoaderError(
            f"loader {name!r} could not build {getattr(row, '__name__', row)!r} from the row "
            f"{short_repr(r)} ({error}); row= is called as row(**columns), so it must accept "
            "every selected column (choose them with columns=[...])",
            loader=name,
            keys=keys,
        ) from error
