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

from ._errors import DelayError
from ._hooks import log
from ._model import Envelope, Outcome
from ._times import delay_problem

__all__ = ["check_envelopes", "screen_outcomes"]

_KINDS = ("done", "retry", "dead", "release")


def screen_outcomes(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """``outcomes``, each one a store could not keep replaced by what becomes of its job."""
    return [_screen(o) for o in outcomes]


def _screen(o: Outcome) -> Outcome:
    if o.kind == "retry":
        if delay_problem(o.due) is not None:
            return _dead(o, f"its retry outcome had due={o.due!r}, not a finite Unix time")
        if not isinstance(o.payload, str):
            return _dead(o, f"its retry outcome had payload={o.payload!r}, not a string")
    elif o.kind == "done" and delay_problem(o.keep) is not None:
        log.warning(
            "job %s: keep=%r is not a finite number of seconds >= 0; its result is not kept",
            o.id,
            o.keep,
        )
        return replace(o, keep=0.0, result=None)
    elif o.kind not in _KINDS:
        return _dead(o, f"its outcome kind {o.kind!r} is none of {', '.join(_KINDS)}")
    return o


def _dead(o: Outcome, problem: str) -> Outcome:
    reason = (
        f"job {o.id}: {problem}, so no store can keep it; dead instead (a bug in a backoff "
        f"or a custom worker; `batchy dead retry {o.id}` runs it again)"
    )
    log.error("%s", reason)
    return replace(o, kind="dead", payload=o.payload or "", reason=reason, traceback="")


def check_envelopes(envelopes: Sequence[Envelope]) -> None:
    """Raise :class:`DelayError` if an envelope's due time or unique TTL is unusable."""
    for e in envelopes:
        if e.due is None and e.unique_ttl == 0.0:
            continue  # the defaults: no time to check
        for name, value in (("due", e.due), ("unique_ttl", e.unique_ttl)):
            problem = None if value is None else delay_problem(value)
            if problem is not None:
                raise DelayError(
                    f"job {e.id}: {name}={value!r} {problem}; an envelope's due is a Unix "
                    "time (None: now) and its unique_ttl seconds >= 0; nothing was enqueued"
                )
