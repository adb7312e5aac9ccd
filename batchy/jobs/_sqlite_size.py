"""The longest row a SQLite file takes: a value past it fails its own job, never a round trip.

SQLite refuses a string, and a row, longer than its length limit
(``SQLITE_LIMIT_LENGTH``, a billion bytes unless built otherwise) with "string
or blob too big", and that error fails the whole transaction. A row holds
several of a job's texts (a done job's result beside its payload, a dead job's
reason and traceback beside its payload), so each is measured with the others
of its row, leaving :data:`ROOM` for what the store adds later (a claim's
worker id and token). A worker's cycle carries the outcomes
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

__all__ = [
    "ROOM",
    "check_lengths",
    "check_progress",
    "fit_death",
    "fit_result",
    "length_limit",
    "screen_lengths",
]

#: Bytes of a row kept for what the store writes beside a job's texts: a claim's
#: worker id and lease token, times, SQLite's record header. Small beside the
#: limit; without it a payload that just fits could never be claimed.
ROOM = 1024


def length_limit(db: sqlite3.Connection) -> int:
    """The longest string, in bytes, that ``db`` stores."""
    return db.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)


def _size(text: str | None) -> int:
    return 0 if text is None else len(text.encode("utf-8", "surrogatepass"))


def _over(text: str | None, limit: int, *beside: str | None) -> int:
    """The UTF-8 length of ``text`` if a row of it, ``beside`` and :data:`ROOM` is
    past ``limit`` bytes, else 0."""
    texts = (text, *beside)
    # Encoded only when it may be too long: a character is 4 bytes at most.
    if text is None or sum(len(t) for t in texts if t) * 4 + ROOM <= limit:
        return 0
    size = _size(text)
    return size if size + sum(map(_size, beside)) + ROOM > limit else 0


def check_lengths(store: object, envelopes: Sequence[Envelope], db: object) -> None:
    """Raise :class:`SerializationError` if an envelope's payload is too long for ``db``."""
    if not isinstance(db, sqlite3.Connection):
        return  # (an application's connection of another kind is refused as it joins)
    limit = length_limit(db)
    for e in envelopes:
        size = _over(e.payload, limit, e.id, e.queue, e.key)
        if size:
            raise SerializationError(
                f"job {e.id} (queue {e.queue!r}) cannot be enqueued on {store!r}: its payload "
                f"is {size:,} bytes, and SQLite stores at most {limit:,} bytes in a row, {ROOM:,} "
                "of them kept for the store's own columns. "
                "Pass a reference to large data (a file name, a row id) rather than the data; "
                "nothing was enqueued"
            )


def check_progress(store: object, job_id: str, payload: str, db: sqlite3.Connection) -> None:
    """Raise :class:`SerializationError` if a running job's new payload is too long."""
    limit = length_limit(db)
    size = _over(payload, limit, job_id)
    if size:
        raise SerializationError(
            f"job {job_id}: its progress cannot be saved on {store!r}: its payload with the "
            f"new cursor is {size:,} bytes, and SQLite stores at most {limit:,} bytes in a row, "
            f"{ROOM:,} of them kept for the store's own columns; return a small cursor (the "
            "last key processed, not the rows)"
        )


def screen_lengths(outcomes: Sequence[Outcome], limit: int) -> list[Outcome]:
    """``outcomes``, each value too long for the file dropped, cut or made a death."""
    return [_screen(o, limit) for o in outcomes]


def _screen(o: Outcome, limit: int) -> Outcome:
    if o.kind not in ("retry", "dead"):
        return o
    size = _over(o.payload, limit, o.id, o.queue)
    if size:
        reason = (
            f"job {o.id}: its payload with the failure noted came to {size:,} bytes, and "
            f"SQLite stores at most {limit:,} bytes in a row; dead instead of "
            f"{'retried' if o.kind == 'retry' else 'kept with it'} (its last error: "
            f"{o.reason[:500] or 'see the payload'})"
        )
        log.error("%s", reason)
        # Without a payload the dead set keeps the one the job was claimed with
        # (its reason and traceback are fitted beside it: fit_death).
        return replace(o, kind="dead", payload=None, reason=reason)
    return o


def fit_result(limit: int, job_id: str, result: str | None, *beside: str | None) -> str | None:
    """``result``, or None if it does not fit in a row beside the done job's ``beside``."""
    size = _over(result, limit, job_id, *beside)
    if not size:
        return result
    log.warning(
        "job %s: its result is %s bytes, and SQLite stores at most %s bytes in a row "
        "(beside the job's payload); it is not kept (return a reference to large "
        "data, not the data)",
        job_id,
        f"{size:,}",
        f"{limit:,}",
    )
    return None


def fit_death(limit: int, reason: str, traceback: str, *beside: str | None) -> tuple[str, str]:
    """``reason`` and ``traceback``, cut to fit in a row beside the dead job's ``beside``."""
    if not _over(reason + traceback, limit, *beside):
        return reason, traceback
    # The reason's start says what, the traceback's end where. The reason has the
    # first claim on the room, at least half of it: cut in halves by a character's
    # largest size (4 bytes), a reason of a few hundred characters lost its end
    # (the fix it suggests) beside a traceback of thousands (3.13's are longer).
    room = max(0, limit - ROOM - sum(map(_size, beside)))
    reason = _bytes(reason, max(room // 2, room - _size(traceback)), head=True)
    return reason, _bytes(traceback, room - _size(reason), head=False)


def _bytes(text: str, size: int, *, head: bool) -> str:
    """The start (``head``) or the end of ``text`` in at most ``size`` bytes of UTF-8."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= size:
        return text
    part = data[:size] if head else data[len(data) - size :] if size > 0 else b""
    return part.decode("utf-8", "ignore")  # a character cut in two is left out
