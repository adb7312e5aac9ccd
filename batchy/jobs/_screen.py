"""The last look at what a store is handed: a value no store can keep fails its own job only.

A store writes a whole round trip at once (one Lua script, one transaction), so
one value it cannot keep (a NaN due time: SQLite's ``NOT NULL``, Redis's "not a
valid float") would fail every outcome in it, and the other jobs' outcomes would
stay unrecorded. The worker screens each outcome as its job finishes, and every
store screens again (the worker may be someone else's): a retry with an unusable
due time goes dead with the reason instead, a result with an unusable ``keep``
is not kept. Envelopes are all or nothing, so a bad one fails its push, loudly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ._errors import DelayError, TextError
from ._hooks import log
from ._model import Envelope, Outcome
from ._times import delay_problem, span_problem

__all__ = ["QUEUE_CHARS", "check_envelopes", "check_lookup", "screen_outcomes", "text_problem"]

_KINDS = ("done", "retry", "dead", "release")
#: What a queue name is made of: stores keep it in fields they separate with others.
QUEUE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:")
#: The longest id, queue name or key (UTF-8 bytes) every store can index.
MAX_TEXT = 1000
_KEPT = (
    "the store keeps the payload it was claimed with; have the serializer escape such "
    "text, as json.dumps does unless ensure_ascii=False"
)
_FIELDS = {"id": "id", "queue": "queue name", "key": "ordering key", "unique": "unique key"}


def screen_outcomes(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """``outcomes``, each one a store could not keep replaced by what becomes of its job."""
    return [_screen(o) for o in outcomes]


def _screen(o: Outcome) -> Outcome:
    if o.kind == "retry":
        if delay_problem(o.due) is not None:
            return _dead(o, f"its retry outcome had due={o.due!r}, not a finite Unix time")
        if not isinstance(o.payload, str):
            return _dead(o, f"its retry outcome had payload={o.payload!r}, not a string")
        problem = text_problem(o.payload)
        if problem is not None:
            # (A serializer that writes text as it is, and an error's message with
            # a file name's lone surrogate in it.) The claimed payload is kept.
            bad = f"its retry payload {o.payload[:200]!r} {problem} ({_KEPT})"
            return _dead(replace(o, payload=None), bad)
    elif o.kind == "done":
        if span_problem(o.keep) is not None:
            log.warning(
                "job %s: keep=%r is not a finite number of seconds >= 0 and at most ten years; "
                "its result is not kept",
                o.id,
                o.keep,
            )
            return replace(o, keep=0.0, result=None)
        result = o.result
        problem = None if result is None else text_problem(result)
        if problem is not None:
            log.warning(
                "job %s: its result %r %s; it is not kept", o.id, str(result)[:200], problem
            )
            return replace(o, result=None)
    elif o.kind == "dead":
        payload = o.payload
        problem = None if payload is None else text_problem(payload)
        if payload is not None and problem is not None:
            log.warning("job %s: its dead payload %r %s; %s", o.id, payload[:200], problem, _KEPT)
            o = replace(o, payload=None)
        # An exception's message is any text: one decoded with errors="surrogateescape"
        # (a file name) holds lone surrogates, which no store encodes; written out
        # as escapes, they still say what the text was.
        if text_problem(o.reason) is not None or text_problem(o.traceback) is not None:
            return replace(o, reason=_escaped(o.reason), traceback=_escaped(o.traceback))
    elif o.kind not in _KINDS:
        return _dead(o, f"its outcome kind {o.kind!r} is none of {', '.join(_KINDS)}")
    return o


def text_problem(text: str) -> str | None:
    """What keeps a store from holding ``text`` (a NUL character, a lone surrogate), or None.

    PostgreSQL text holds no NUL character, and no store can encode a lone
    surrogate as UTF-8; SQLite and Redis would take a NUL, but a job that one
    store accepts must not fail on another.
    """
    if text.isascii():
        return None if "\x00" not in text else "holds a NUL character (\\x00)"
    if "\x00" in text:
        return "holds a NUL character (\\x00)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return (
            f"holds a lone surrogate ({text[error.start]!r} at position {error.start}), which "
            "is not text UTF-8 can encode (bytes decoded with errors='surrogateescape'?)"
        )
    return None


def check_lookup(text: object, what: str, where: str, fix: str) -> None:
    """Raise :class:`TextError` if ``text``, a job id (or a queue, key or run that job
    ids hold) to look up, is no str a store keeps; ``where`` names the call.

    Enqueue refuses such text on every store, so no job has it; asking a store
    would fail in the store's own way (psycopg's DataError for a NUL, a
    UnicodeEncodeError for a lone surrogate) where another answers "unknown".
    """
    if isinstance(text, str):
        problem = text_problem(text)
    else:
        problem = f"is a {type(text).__name__}, not a str"
    if problem is not None:
        raise TextError(
            f"{where}: the {what} {problem}, so no store holds a job with it (enqueue "
            f"refuses such text on every store); {fix}"
        )


def _escaped(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def _dead(o: Outcome, problem: str) -> Outcome:
    reason = (
        f"job {o.id}: {problem}, so no store can keep it; dead instead (a bug in a backoff "
        f"or a custom worker; `batchy dead retry {o.id}` runs it again)"
    )
    log.error("%s", reason)
    # A payload that is no str (a retry's) leaves the job the one it was claimed with.
    payload = o.payload if isinstance(o.payload, str) else None
    return replace(o, kind="dead", payload=payload, reason=reason, traceback="")


def _check_text(job_id: str, field: str, text: object) -> None:
    """Raise :class:`TextError` unless ``text`` is a str every store can keep and index."""
    if not isinstance(text, str):
        raise TextError(
            f"job {job_id!r}: its {field} {text!r} is a {type(text).__name__}, not a str; "
            "nothing was enqueued"
        )
    problem = text_problem(text)
    if problem is not None:
        raise TextError(
            f"the {field} {text!r} of job {job_id} {problem}; the stores keep it as text, "
            "which PostgreSQL holds without NUL and no store with a lone surrogate. Use text "
            "without them (a file name's hex or percent-encoded form, say); nothing was enqueued"
        )
    size = len(text.encode()) if len(text) > MAX_TEXT // 4 else 0
    if size > MAX_TEXT:
        raise TextError(
            f"the {field} {text[:60]!r}... of job {job_id[:60]} is {size:,} bytes long; the "
            "stores index it, and a PostgreSQL index entry holds about 2,700 bytes at most. "
            f"Keep it under {MAX_TEXT:,} bytes (a hash of a long key, say); nothing was enqueued"
        )


def check_envelopes(envelopes: Sequence[Envelope]) -> None:
    """Raise :class:`DelayError` if an envelope's due time or unique TTL is unusable,
    :class:`TextError` if its id, queue, ordering or unique key is text no store can keep."""
    for e in envelopes:
        if not (isinstance(e.queue, str) and e.queue and QUEUE_CHARS.issuperset(e.queue)):
            # (Queue checks names as they are declared; a store is also called directly.)
            raise TextError(
                f"job {e.id!r}: queue name {e.queue!r} is not valid; use letters, digits and "
                "_-.: (stores keep it in separated fields); nothing was enqueued"
            )
        for name, text in (("id", e.id), ("queue", e.queue), ("key", e.key), ("unique", e.unique)):
            if text is not None:
                _check_text(e.id, _FIELDS[name], text)
        for name, text in (("key", e.key), ("unique", e.unique)):
            if text == "":
                # Redis keeps "no key" as '': one store would order (or dedupe) by it, another not.
                raise TextError(
                    f"job {e.id}: its {_FIELDS[name]} is '' (empty), which no store keeps as a "
                    "key; give a non-empty key, or None for none; nothing was enqueued"
                )
        if e.due is None and e.unique_ttl == 0.0:
            continue  # the defaults: no time to check
        for name, value in (("due", e.due), ("unique_ttl", e.unique_ttl)):
            check = delay_problem if name == "due" else span_problem
            problem = None if value is None else check(value)
            if problem is not None:
                raise DelayError(
                    f"job {e.id}: {name}={value!r} {problem}; an envelope's due is a Unix "
                    "time (None: now) and its unique_ttl seconds >= 0; nothing was enqueued"
                )
