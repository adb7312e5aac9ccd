"""The statements the SQL loaders send: checked names, each dialect's forms, keys with positions.

Why names are validated and never quoted-and-pasted: a table or column name
cannot be a bound parameter, and escaping rules differ between servers and
modes (``ANSI_QUOTES``). A strict allow-list (letters, digits, underscore) is
the only rule that is safe everywhere. Keys are always bound parameters.

Why keys go with positions (:func:`keyed_sql`): so that the server, not Python,
says which key each row matched (see :mod:`._match`). :meth:`one` and
:meth:`many` send each key with its position in the batch, as a small derived
table joined to the table on ``t.key = k.key``::

    WITH batchy__keys(batchy__pos, batchy__key) AS (VALUES (0, ?1), (1, ?2))     -- SQLite
    SELECT k.batchy__pos, t.* FROM batchy__keys AS k
    JOIN "users" AS t ON t."name" = k.batchy__key

The table's column is on the left of ``=``: SQLite then compares with the
column's collation and affinity, exactly as ``WHERE name = ?`` would; MySQL
does the same because a literal's collation is only *coercible*. Each row
comes back with the position of the key it matched, once per matching key.
Positions are ints we generate, written into the SQL; keys are always bound.

MySQL gets ``WHERE t.key IN (...)`` as well: without it, an unindexed column
whose collation differs from the connection's is joined by a block nested
loop (rows x keys comparisons; seconds for 1,000 keys on 200,000 rows); with
it the server filters the table first. On MariaDB the derived table is a
``VALUES`` list (faster to parse than ``UNION ALL SELECT``, which MySQL needs),
and the statement runs with ``SET STATEMENT join_cache_level=6,
optimizer_switch='join_cache_hashed=off' FOR``: batched key access for an
indexed column, and no hash join (BNLH), whose join buffer compares some
collations byte by byte (a ``VARCHAR`` under ``utf8mb4_bin``: ``'Ada '``
missed ``'Ada'``, which ``=`` pads; a ``CHAR`` under a NO PAD ``_ci``
collation lost rows). Text keys against a column whose hash join matches as
``=`` does (:attr:`Dialect.unfiltered_prefix`, :meth:`Match.unfiltered`:
on MariaDB, a ``VARCHAR`` under a collation not ending in ``_bin``) go without
the ``IN`` filter and with hash joins allowed (``SET STATEMENT
join_cache_level=6 FOR``): each key sent once, the statement half as long, an
unindexed column hash-joined instead of scanned once per key. Text keys
against a ``CHAR`` go without the filter too, hash joins still off: MariaDB
reads an index of a ``CHAR`` under a NO PAD collation with the value padded to
the column's length, so ``'straße'`` finds ``'straße'`` and not ``'strasse'``
(one character longer), though ``=`` calls them equal; an ``IN`` list whose
keys are all equal (``'STRASSE'``, ``'straße'``) is read as its first key
alone, and both keys got ``'strasse'`` only. Without the filter each key is
looked up alone, as ``WHERE name = key`` alone is.
SQLite plans the join well with an index on the key column; the same ``IN``
filter there costs 10-15% with one and does not save the unindexed case.

PostgreSQL (``keys_table="array"``) takes the keys as **one** array parameter,
so the statement is the same short text for 1 key or 50,000 (and is prepared
once): ``WHERE t.key = ANY(%s)`` without positions, and with them::

    SELECT k.batchy__pos - 1 AS batchy__pos, t.* FROM unnest(COALESCE(%s,
      ARRAY(SELECT t0."name" FROM "users" AS t0 LIMIT 0)))
      WITH ORDINALITY AS k(batchy__key, batchy__pos)
    JOIN "users" AS t ON t."name" = k.batchy__key

The array is sent untyped (its elements as text), and ``COALESCE`` with an
empty array of the key column gives it the column's type, so the server reads
each key as a value of that column (as it reads ``WHERE name = 'ADA'``) and
compares under the column's type and collation (``citext``, a
nondeterministic ICU collation) without batchy asking the catalog first. The
planner drops the ``COALESCE`` for a given array and sees how many keys it has.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from batchy import UsageError, short_repr

__all__ = [
    "KEYS_MARK",
    "POS",
    "Dialect",
    "Select",
    "identifier",
    "keyed_sql",
    "plain_sql",
    "query_sql",
    "repeats",
    "select",
]

#: Names of our own columns and table: unlikely to collide with a user's.
POS = "batchy__pos"
KEY = "batchy__key"
KEYS = "batchy__keys"

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
    """How one SQL flavour quotes a (validated) name, writes placeholders and lists keys."""

    name: str
    quote: str  # the identifier quote character
    param: str  # the placeholder of one bound parameter
    keys_table: Literal["cte", "values", "union", "array"]  # how keys and positions are listed
    in_filter: bool  # also filter the table with IN (see the module docstring)
    #: Put before every keyed statement: MariaDB's ``SET STATEMENT ... FOR``.
    keyed_prefix: str = ""
    #: Put before a keyed statement without the IN filter that may be hash-joined,
    #: or None: this dialect has no statement without the filter. Used for text
    #: keys against a column where it is correct (:meth:`Match.unfiltered`).
    unfiltered_prefix: str | None = None

    @property
    def array(self) -> bool:
        """The keys go as one array parameter (PostgreSQL), not one placeholder each."""
        return self.keys_table == "array"

    def q(self, name: str) -> str:
        return f"{self.quote}{name}{self.quote}"

    def params(self, n: int) -> str:
        """``(p, p, ..., p)``: an ``IN`` list of ``n`` placeholders."""
        return "(" + ", ".join([self.param] * n) + ")"

    def in_keys(self, n: int) -> str:
        """The test of a column against ``n`` keys: ``IN (p, ..., p)``, or ``= ANY(p)``."""
        return f"= ANY({self.param})" if self.array else "IN " + self.params(n)


def _order(dialect: Dialect, order_by: str | Sequence[str] | None) -> str:
    if order_by is None:
        return ""
    items = [order_by] if isinstance(order_by, str) else list(order_by)
    parts = []
    for item in items:
        desc = isinstance(item, str) and item.startswith("-")
        col = identifier(item[1:] if desc else item, "order_by column")
        parts.append("t." + dialect.q(col) + (" DESC" if desc else ""))
    return " ORDER BY " + ", ".join(parts) if parts else ""


def select(
    d: Dialect,
    table: str,
    key: str,
    columns: Sequence[str] | None,
    order_by: str | Sequence[str] | None,
) -> Select:
    """The key-independent parts of one()/many()'s statement, names checked and quoted."""
    table = identifier(table, "table")
    key = identifier(key, "key column")
    if columns is None:
        cols = "t.*"
    else:
        if isinstance(columns, str):
            raise UsageError(
                f"columns= takes a list of column names, got the string {columns!r}; "
                f"write columns=[{columns!r}]"
            )
        names = [identifier(c, "column") for c in columns]
        if key not in names:
            names.append(key)  # the rows' key values tell mismatched key types
        cols = ", ".join("t." + d.q(c) for c in names)
    return Select(d.q(table), d.q(key), cols, _order(d, order_by))


@dataclass(frozen=True, slots=True)
class Select:
    """The parts of one()/many()'s statement that do not depend on the keys (all quoted)."""

    table: str
    key: str
    columns: str  # "t.*" or 't."a", t."b"'
    order: str  # "" or ' ORDER BY t."id" DESC'


def keyed_sql(
    select: Select,
    n: int,
    d: Dialect,
    filtered: bool = True,
    charset: str | None = None,
    hashed: bool = True,
) -> str:
    """The statement for ``n`` keys: each row with the position of the key it matched.

    Its placeholders take the keys in order, twice over with ``d.in_filter``
    and ``filtered`` (once for the positions, once for the ``IN`` filter): see
    :func:`repeats`. ``charset`` (MySQL): the key column's character set, where
    it is not the connection's; the keys are converted to it before they meet
    the column (see :mod:`.mysql`). ``hashed``: an unfiltered statement may be
    hash-joined (else it keeps :attr:`Dialect.keyed_prefix`).
    """
    s = select
    if d.array:
        # One array, whatever n; COALESCE types it as the key column (module docstring).
        keys = f"COALESCE({d.param}, ARRAY(SELECT t0.{s.key} FROM {s.table} AS t0 LIMIT 0))"
        return (
            f"SELECT k.{POS} - 1 AS {POS}, {s.columns} FROM unnest({keys}) "
            f"WITH ORDINALITY AS k({KEY}, {POS}) "
            f"JOIN {s.table} AS t ON t.{s.key} = k.{KEY}{s.order}"
        )
    rows = _rows_of(d.param, n)
    if d.keys_table == "cte":
        head = f"WITH {KEYS}({POS}, {KEY}) AS (VALUES {', '.join(rows)}) "
        source = f"{KEYS} AS k"
    else:
        first = f"SELECT 0 AS {POS}, {d.param} AS {KEY}"
        if n == 1:
            rest = ""
        elif d.keys_table == "values":
            rest = " UNION ALL VALUES " + ", ".join(rows[1:])
        else:
            rest = " UNION ALL SELECT " + " UNION ALL SELECT ".join(r[1:-1] for r in rows[1:])
        head = ""
        source = f"({first}{rest}) AS k"
    key = f"k.{KEY}" if charset is None else f"CONVERT(k.{KEY} USING {charset})"
    where = f" WHERE t.{s.key} IN {d.params(n)}" if d.in_filter and filtered else ""
    unhashed = filtered or not hashed or d.unfiltered_prefix is None
    prefix = d.keyed_prefix if unhashed else d.unfiltered_prefix
    return (
        f"{prefix}{head}SELECT k.{POS}, {s.columns} FROM {source} "
        f"JOIN {s.table} AS t ON t.{s.key} = {key}{where}{s.order}"
    )


def repeats(d: Dialect, filtered: bool = True) -> int:
    """How many times :func:`keyed_sql`'s statement takes its keys, in order."""
    return 2 if d.in_filter and filtered else 1


#: "(0, ?)", "(1, ?)", ...: built once per placeholder style, since the keyed
#: statement is rebuilt for every batch (half a millisecond for 1,000 keys).
_ROWS: dict[str, list[str]] = {}


def _rows_of(param: str, n: int) -> list[str]:
    rows = _ROWS.get(param, [])
    if len(rows) < n:
        # A new list, never one grown in place: loops in other threads may be reading.
        rows = _ROWS[param] = [f"({i}, {param})" for i in range(max(n, 2 * len(rows)))]
    return rows[:n]


def plain_sql(select: Select, n: int, d: Dialect) -> str:
    """``WHERE key IN (...)``: for keys Python matches exactly (see :mod:`._match`)."""
    s = select
    return f"SELECT {s.columns} FROM {s.table} AS t WHERE t.{s.key} {d.in_keys(n)}{s.order}"


#: ``IN {keys}`` and ``NOT IN {keys}`` in a db.query() statement, for an array dialect.
_IN_KEYS = re.compile(r"\b(NOT\s+)?IN\s*" + re.escape(KEYS_MARK), re.IGNORECASE)


def query_sql(sql: str, n: int, d: Dialect) -> str:
    """A db.query() statement for ``n`` keys: ``{keys}`` becomes the bound key list.

    With an array dialect, ``col IN {keys}`` becomes ``col = ANY(%s)`` (and
    ``NOT IN``, ``<> ALL(%s)``), so one statement text serves every backend;
    a ``{keys}`` elsewhere is the array parameter itself.
    """
    if not d.array:
        return sql.replace(KEYS_MARK, d.params(n))
    p = d.param
    sql = _IN_KEYS.sub(lambda m: f"<> ALL({p})" if m.group(1) else f"= ANY({p})", sql)
    return sql.replace(KEYS_MARK, p)
