"""How rows reach their keys: by the position the server returned, or by Python equality.

Why the server matches, not Python: a key equals a row when the *server* says
so, under the column's collation and type rules. ``'ADA'`` equals ``'ada'`` in
a ``utf8mb4_general_ci`` or ``COLLATE NOCASE`` column, ``'trail'`` equals
``'traíl'`` in an accent-insensitive one, ``'7'`` equals ``7`` in an INT column;
Python says no to all three. So :meth:`one` and :meth:`many` send the keys with
their positions (:mod:`._build`), and each row comes back with the position
of every key it matched: ``'ADA'`` and ``'ada'`` in one batch both get the row.

Positions cost a join and a column. Where Python is exact they are skipped:
int keys against a column seen to return ints (an integer column; with
SQLite, not TEXT affinity) compare as integers on the server and in Python
alike, so ``WHERE key IN (...)`` and Python matching give the same answer.
That covers ids and foreign keys, the usual loaders. What was seen is kept per
database, table and column, not per loader: loaders made per request (or per
test) over the same column skip the positions from their first batch. If such
a column ever returns something else (ALTER TABLE), the batch is asked again
with positions, and every loader of that column learns it.

MariaDB learns one more thing per column, from the column the server
reports in every result: whether text keys may go without the ``IN`` filter
beside the positions, and with a hash join or not (see
:meth:`Match.learn_unfiltered`). Against a ``VARCHAR`` whose hash join matches
keys as ``=`` does they go unfiltered, hash join allowed (:mod:`._build`),
which halves the statement; against a ``CHAR`` they go unfiltered, hash join
off, because the filter itself lost rows there; any other batch keeps the
filter, hash join off. The first batch of a column, before anything is
learnt, keeps it too (and a ``CHAR`` column's is asked again unfiltered).

:meth:`query` runs your SQL, which batchy cannot rewrite, so its rows are
matched to keys by Python equality on the key column: there, keys must equal
the column's values in Python too.
"""

from __future__ import annotations

import datetime
import decimal
import warnings
from collections.abc import Callable
from typing import Any

from batchy import LoaderError, short_repr

from ._build import POS

__all__ = ["KeyTypeWarning", "Match", "Seen"]

Row = dict[str, Any]


class KeyTypeWarning(UserWarning):
    """Keys of one type found no rows while the rows found hold another type in the key column."""


class Seen:
    """What one database's key columns were seen to hold, as ``(table, column)`` pairs.

    Shared by every loader of the database, so a loader made per request gains too.
    """

    __slots__ = ("charsets", "ints", "unfiltered")

    def __init__(self) -> None:
        self.ints: set[tuple[str, str]] = set()  # returned only ints so far
        #: Last reported as a column that takes text keys without the IN filter:
        #: True where a hash join matches them as = does, False where it must not be used.
        self.unfiltered: dict[tuple[str, str], bool] = {}
        #: MySQL: the character set of a column the server would not compare with
        #: the connection's text (latin1, ascii); its keys are converted to it.
        self.charsets: dict[tuple[str, str], str] = {}


class Match:
    """How one loader's rows reach its keys; what the database learnt of its column; warn once."""

    __slots__ = ("column", "key", "many", "name", "row", "seen", "warned")

    def __init__(
        self,
        name: str,
        key: str,
        many: bool,
        row: Callable[..., Any] | None,
        *,
        table: str = "",
        seen: Seen | None = None,
    ) -> None:
        self.name = name
        self.key = key
        self.many = many
        self.row = row
        self.column = (table, key)
        self.seen = seen if seen is not None else Seen()
        self.warned = False

    @property
    def int_column(self) -> bool:
        """The key column returned only ints so far."""
        return self.column in self.seen.ints

    @int_column.setter
    def int_column(self, value: bool) -> None:
        if value:
            self.seen.ints.add(self.column)
        else:
            self.seen.ints.discard(self.column)

    @property
    def charset(self) -> str | None:
        """The key column's character set, once learnt because it is not the connection's."""
        return self.seen.charsets.get(self.column)

    def charset_for(self, keys: list[Any]) -> str | None:
        """The charset to convert these keys to: :attr:`charset`, if they are all text
        (a date is sent as text too); None for numbers and bytes, which are no text."""
        charset = self.charset
        if charset is None or any(isinstance(k, _NOT_TEXT) for k in keys):
            return None
        return charset

    def learn_charset(self, charset: str | None) -> None:
        """Record the key column's character set (None: the connection's, no conversion)."""
        if charset is None:
            self.seen.charsets.pop(self.column, None)
        else:
            self.seen.charsets[self.column] = charset

    def exact_in_python(self, keys: list[Any]) -> bool:
        """True if Python's == gives these keys the rows the server would (no positions needed)."""
        if not self.int_column:
            return False
        return all(type(k) is int or k is None for k in keys)

    def unfiltered(self, keys: list[Any]) -> bool | None:
        """None if these keys need the IN filter; else whether a hash join may match them.

        Only text keys, against a column last reported as taking them unfiltered
        (see :func:`.mysql._unfiltered`), go without the filter."""
        how = self.seen.unfiltered.get(self.column)
        if how is None or not all(type(k) is str or k is None for k in keys):
            return None
        return how

    def learn_unfiltered(self, how: bool | None) -> None:
        """Record what the server just reported of the key column (see :meth:`unfiltered`)."""
        if how is None:
            self.seen.unfiltered.pop(self.column, None)
        else:
            self.seen.unfiltered[self.column] = how

    def still_ints(self, rows: list[Row]) -> bool:
        """After a batch without positions: did the column return only ints, as it used to?"""
        key = self.key
        for r in rows:
            if type(r.get(key)) is not int:
                self.int_column = False
                return False
        return True

    def values(self, keys: list[Any], rows: list[Row], by_position: bool) -> list[Any]:
        """One value (or list) per key, in key order; an exception for a key that fails alone."""
        if rows and self.key not in rows[0]:
            raise LoaderError(
                f"loader {self.name!r}: the query's rows have no column {self.key!r} to match "
                f"them to keys (columns: {sorted(c for c in rows[0] if c != POS)}); select it, "
                "or pass key= naming it",
                loader=self.name,
                keys=keys,
            )
        found: list[list[Any] | None] = [None] * len(keys)
        if by_position:
            if rows and not self.int_column:
                key = self.key
                self.int_column = all(type(r[key]) is int for r in rows)
            for r in rows:
                pos = r.pop(POS)
                hits = found[pos]
                if hits is None:
                    found[pos] = [r]
                else:
                    hits.append(r)
        else:
            where: dict[Any, int] = {k: i for i, k in enumerate(keys)}
            key = self.key
            for r in rows:
                i = where.get(r[key], -1)
                if i < 0:
                    continue  # a row for no key of ours (see _warn)
                hits = found[i]
                if hits is None:
                    found[i] = [r]
                else:
                    hits.append(r)
        if not self.warned and rows and None in found:
            self._warn(keys, rows, found, by_position)
        row = self.row
        if self.many:
            if row is None:
                return [hits or [] for hits in found]
            return [[self._build(keys, r) for r in hits] if hits else [] for hits in found]
        out: list[Any] = []
        for k, hits in zip(keys, found, strict=True):
            if hits is None:
                out.append(None)
            elif len(hits) == 1:
                out.append(hits[0] if row is None else self._build(keys, hits[0]))
            else:  # fail this key only: the others are fine
                out.append(self._not_unique(k, hits))
        return out

    def _not_unique(self, k: Any, hits: list[Row]) -> LoaderError:
        values = [r.get(self.key) for r in hits]
        under = ""
        if any(v != k for v in values):
            under = (
                f" (the server counts {short_repr(values)} as equal to the key: the "
                "column's collation or type rules)"
            )
        return LoaderError(
            f"loader {self.name!r} expects at most one row per key but got {len(hits)} "
            f"rows for key {short_repr(k)}; the {self.key!r} column is not unique{under}. "
            "Use db.many(...) (or query(..., many=True)) to get a list per key.",
            loader=self.name,
            keys=[k],
        )

    def _build(self, keys: list[Any], r: Row) -> Any:
        row = self.row
        if row is None:
            return r
        try:
            return row(**r)
        except TypeError as error:
            raise LoaderError(
                f"loader {self.name!r} could not build {getattr(row, '__name__', row)!r} from "
                f"the row {short_repr(r)} ({error}); row= is called as row(**columns), so it "
                "must accept every selected column (choose them with columns=[...])",
                loader=self.name,
                keys=keys,
            ) from error

    def _warn(
        self, keys: list[Any], rows: list[Row], found: list[list[Any] | None], by_position: bool
    ) -> None:
        # Keys of a kind that no returned row holds: '7' against an INT column in
        # db.query() (Python: '7' != 7), b'7' against INTEGER on SQLite. Checked
        # only while some key found nothing, and stops at the first row of each kind.
        missing = {_family(k): k for k, hits in zip(keys, found, strict=True) if hits is None}
        missing.pop(None, None)  # a None key never matches: nothing to warn about
        if not missing:
            return
        held: dict[str, Any] = {}
        for r in rows:
            fam = _family(r.get(self.key))
            if fam is not None and fam not in held:
                held[fam] = r[self.key]
                if all(f in held for f in missing):
                    return
        if not held:
            return
        fam, example = next((f, k) for f, k in missing.items() if f not in held)
        kinds = ", ".join(sorted(held))
        how = (
            "the server compared them and found no match"
            if by_position
            else "db.query() matches rows to keys with Python ==, where '7' != 7"
        )
        self.warned = True
        warnings.warn(
            f"loader {self.name!r}: keys of type {fam} (such as {short_repr(example)}) found "
            f"no rows, while the rows it did find hold {kinds} values in column {self.key!r} "
            f"({short_repr(next(iter(held.values())))}); {how}. Pass keys of the column's "
            "type. (Shown once per loader.)",
            KeyTypeWarning,
            stacklevel=2,
        )


_NOT_TEXT = (int, float, decimal.Decimal, bytes, bytearray, memoryview)


def _family(value: Any) -> str | None:
    """The kind of a value as far as matching goes: 1, 1.0 and Decimal(1) are all numbers."""
    if value is None:
        return None
    if isinstance(value, (int, float, decimal.Decimal)):
        return "number"
    if isinstance(value, str):
        return "str"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes"
    if isinstance(value, (datetime.date, datetime.time, datetime.timedelta)):
        return "date/time"
    return type(value).__name__
