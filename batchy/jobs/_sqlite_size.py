"""The longest text a SQLite file takes: a value past it fails its own job, never a round trip.

SQLite refuses a string longer than its length limit (``SQLITE_LIMIT_LENGTH``,
a billion bytes unless built otherwise) with "string or blob too big", and
that error fails the whole transaction. A worker's cycle carries the outcomes
of many jobs: one result past the limit failed every cycle after it, so the
worker claimed nothing more and its other outcomes were never recorded, while
it logged the store as unreachable. So each value is measured first: a result
too long is not kept, a retry whose payload is too long goes dead, a dead job's
reason and traceback are cut; an enqueue too long is refused, naming the job, and
so is a running job's progress (a sharded job's cursor).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace

from ._errors import SerializationError
from ._hooks import log
from ._model import Envelope, Outcome

__all__ = ["check_lengths", "check_progress", "length_limit", "screen_lengths"]


def length_limit(db: sqlite3.Connection) -> int:
    """The longest string, in bytes, that ``db`` stores."""
    return db.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)


def _over(text: str | None, limit: int) -> int:
    """The UTF-8 length of ``text`` if it is past ``limit`` bytes, else 0."""
    # Encoded only when it may be too long: a character is 4 bytes at most.
    if text is None or len(text) * 4 <= limit:
        return 0
    size = len(text.encode("utf-8", "surrogatepass"))
    return size if size > limit else 0


def check_lengths(store: object, envelopes: Sequence[Envelope], db: object) -> None:
    """Raise :class:`SerializationError` if an envelope's payload is too long for ``db``."""
    if not isinstance(db, sqlite3.Connection):
        return  # (an application's connection of another kind is refused as it joins)
    limit = length_limit(db)
    for e in envelopes:
        size = _over(e.payload, limit)
        if size:
            raise SerializationError(
                f"job {e.id} (queue {e.queue!r}) cannot be enqueued on {store!r}: its payload "
                f"is {size:,} bytes, and SQLite stores at most {limit:,} bytes in a value. "
                "Pass a reference to large data (a file name, a row id) rather than the data; "
                "nothing was enqueued"
            )


def check_progress(store: object, job_id: str, payload: str, db: sqlite3.Connection) -> None:
    """Raise :class:`SerializationError` if a running job's new payload is too long."""
    limit = length_limit(db)
    size = _over(payload, limit)
    if size:
        raise SerializationError(
            f"job {job_id}: its progress cannot be saved on {store!r}: its payload with the "
            f"new cursor is {size:,} bytes, and SQLite stores at most {limit:,} bytes in a "
            "value; return a small cursor (the last key processed, not the rows)"
        )


def screen_lengths(outcomes: Sequence[Outcome], limit: int) -> list[Outcome]:
    """``outcomes``, each value too long for the file dropped, cut or made a death."""
    return [_screen(o, limit) for o in outcomes]


def _screen(o: Outcome, limit: int) -> Outcome:
    if o.kind == "done" and _over(o.result, limit):
        size = _over(o.result, limit)
        log.warning(
            "job %s: its result is %s bytes, and SQLite stores at most %s bytes in a value; "
            "it is kept as null (return a reference to large data, not the data)",
            o.id,
            f"{size:,}",
            f"{limit:,}",
        )
        return replace(o, result=None)
    if o.kind in ("retry", "dead") and _over(o.payload, limit):
        size = _over(o.payload, limit)
        reason = (
            f"job {o.id}: its payload with the failure noted came to {size:,} bytes, and "
            f"SQLite stores at most {limit:,} bytes in a value; dead instead of "
            f"{'retried' if o.kind == 'retry' else 'kept with it'} (its last error: "
            f"{o.reason[:500] or 'see the payload'})"
        )
        log.error("%s", reason)
        # Without a payload the dead set keeps the one the job was claimed with.
        return replace(o, kind="dead", payload=None, reason=reason, traceback=o.traceback[-8000:])
    if o.kind == "dead" and (_over(o.reason, limit) or _over(o.traceback, limit)):
        # Cut well inside the limit: the reason's start says what, the traceback's end where.
        keep = limit // 8
        return replace(o, reason=o.reason[:keep], traceback=o.traceback[-keep:])
    return o
