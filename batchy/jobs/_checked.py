"""Every store's entry points take text no job can have alike, before the store is asked.

Enqueue refuses an id, queue or key with a NUL character or a lone surrogate on
every store (:func:`._screen.check_envelopes`), so no job has one. Asked about
such text, each store failed in its own way (psycopg's DataError for a NUL, a
UnicodeEncodeError for a lone surrogate) or answered "unknown" (memory).
:class:`batchy.jobs.Queue` and :class:`batchy.jobs.Admin` check what they are
handed, but :class:`Backend` is a documented extension point that other code
calls directly; so :meth:`Backend.__init_subclass__` wraps the entry points of
every store, batchy's or not, with :func:`check_entry_points`:

- a look-up or an operator's action (``status``, ``job``, ``act``, ``list_jobs``'
  filters, the dead set, sharded runs' names) raises :class:`TextError`;
- a worker's round trip never fails for one job's values: an outcome, heartbeat
  or progress save for such an id (or token) is refused as any claim that does
  not hold is (fencing), and the rest of the round trip lands;
- what no store could write (a worker's id, a progress save's payload) raises
  :class:`TextError`: SQLite and Redis took a NUL that PostgreSQL refused, and
  the memory store kept what the others failed to encode.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from batchy import short_repr

from ._errors import TextError
from ._screen import check_lookup, text_problem

__all__ = ["check_entry_points", "keepable"]

_FIX = "nothing was asked of the store; pass an id a job has (enqueue's handle.id)"
_FILTER = "take it out of the filter"
_NAMES = "nothing was asked of the store; name jobs and runs with text a job id can hold"
_WORKER = "name workers with text a job id can hold"
_PAYLOAD = (
    "save a payload without them: have the serializer escape them (json.dumps does, "
    "unless ensure_ascii=False), or return a cursor without them"
)
# What an entry point is handed: its position (None: keyword only) and name, what
# it is, whether a collection of them (or None: all), and what to do instead.
_Arg = tuple[int | None, str, str, bool, str]
_ID: _Arg = (0, "job_id", "job id", False, _FIX)
_IDS: _Arg = (0, "job_ids", "job id", True, _FIX)
_NAME: _Arg = (0, "name", "job name", False, _NAMES)
_RUN: _Arg = (1, "run", "run name", False, _NAMES)
_LOOKUPS: dict[str, tuple[_Arg, ...]] = {
    "status": (_ID,),
    "job": (_ID,),
    "statuses": (_IDS,),
    "jobs": (_IDS,),
    "act": ((1, "ids", "job id", True, _FIX),),
    "retry_dead": ((0, "ids", "job id", True, _FIX),),
    "delete_dead": ((0, "ids", "job id", True, _FIX),),
    "list_jobs": (
        (None, "queue", "queue", False, _FILTER),
        (None, "key", "ordering key", False, _FILTER),
    ),
    "note_run": (_NAME, _RUN),
    "runs": (_NAME,),
    "run_started": (_NAME, _RUN),
}


def keepable(text: object) -> bool:
    """Whether ``text`` is a str some job could have (quick for the ASCII of most ids)."""
    if type(text) is str and text.isascii():
        return "\x00" not in text
    return isinstance(text, str) and text_problem(text) is None


def _refuse(store: object, call: str, what: str, text: object, fix: str) -> None:
    """Raise :class:`TextError` if ``text`` is no str a store writes (checked: not keepable)."""
    problem = text_problem(text) if isinstance(text, str) else None
    if problem is None:
        problem = f"is a {type(text).__name__}, not a str"
    raise TextError(
        f"{type(store).__name__}.{call}: the {what} {short_repr(text)} {problem}, so no "
        f"store keeps it; nothing was asked of the store; {fix}"
    )


def check_entry_points(cls: type) -> None:
    """Wrap the entry points of ``cls`` so that they check what they are handed."""
    for name, args in _LOOKUPS.items():
        _wrap(cls, name, functools.partial(_looked_up, name, args))
    _wrap(cls, "cycle", _cycle)
    _wrap(cls, "heartbeat", _heartbeat)
    _wrap(cls, "save_progress", _save_progress)


def _wrap(cls: type, name: str, make: Callable[[Any], Any]) -> None:
    # What the store calls, its own or inherited (Backend's defaults, a mixin's);
    # once: a subclass of a store inherits them checked already.
    fn = getattr(cls, name, None)
    abstract = getattr(fn, "__isabstractmethod__", False)
    if callable(fn) and not abstract and not getattr(fn, "_checked", False):
        checked: Any = functools.wraps(fn)(make(fn))
        checked._checked = True
        setattr(cls, name, checked)


def _looked_up(name: str, args: tuple[_Arg, ...], fn: Any) -> Any:
    async def checked(self: Any, *given: Any, **named: Any) -> Any:
        for position, param, what, many, fix in args:
            if position is not None and position < len(given):
                value = given[position]
            else:
                value = named.get(param)
            for text in () if value is None else value if many else (value,):
                if not keepable(text):
                    where = f"{type(self).__name__}.{name}({short_repr(text)})"
                    check_lookup(text, what, where, fix)
        return await fn(self, *given, **named)

    return checked


def _cycle(fn: Any) -> Any:
    async def cycle(self: Any, outcomes: Sequence[Any], queues: Sequence[str], *rest: Any,
                    **named: Any) -> Any:  # fmt: skip
        for queue in queues:
            if not keepable(queue):
                where = f"{type(self).__name__}.cycle(queues=[..., {short_repr(queue)}])"
                check_lookup(queue, "queue", where, "name the worker's queues as declared")
        worker = rest[1] if len(rest) > 1 else named.get("worker", "")
        if not keepable(worker):
            _refuse(self, "cycle", "worker id", worker, _WORKER)
        if all(keepable(o.id) and keepable(o.token) for o in outcomes):
            return await fn(self, outcomes, queues, *rest, **named)
        kept = [o for o in outcomes if keepable(o.id) and keepable(o.token)]
        claims = await fn(self, kept, queues, *rest, **named)
        claims.refused += [o.id for o in outcomes if not (keepable(o.id) and keepable(o.token))]
        return claims

    return cycle


def _heartbeat(fn: Any) -> Any:
    async def heartbeat(self: Any, worker: Any, held: Sequence[tuple[str, str]], *rest: Any,
                        **named: Any) -> Any:  # fmt: skip
        if not keepable(worker.id):
            _refuse(self, "heartbeat", "worker id", worker.id, _WORKER)
        if all(keepable(i) and keepable(t) for i, t in held):
            return await fn(self, worker, held, *rest, **named)
        kept = [(i, t) for i, t in held if keepable(i) and keepable(t)]
        lost: list[str] = await fn(self, worker, kept, *rest, **named)
        return lost + [i for i, t in held if not (keepable(i) and keepable(t))]

    return heartbeat


def _save_progress(fn: Any) -> Any:
    async def save_progress(self: Any, job_id: str, token: str, *rest: Any, **named: Any) -> Any:
        if not (keepable(job_id) and keepable(token)):
            return False  # no claim has it: as for a lease that ended
        payload = rest[0] if rest else named.get("payload")
        if not keepable(payload):
            _refuse(self, f"save_progress({short_repr(job_id)})", "payload", payload, _PAYLOAD)
        return await fn(self, job_id, token, *rest, **named)

    return save_progress
