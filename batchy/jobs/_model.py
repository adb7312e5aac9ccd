"""The records that cross the line between the job system and a store, and their encoding.

A store (a *backend*) never looks inside a payload: it keeps an id, a queue name
and an opaque string. Everything about a job that the worker needs (its type,
arguments, attempt count) is in the payload, a :class:`Message` encoded by a
serializer (:mod:`batchy.jobs._serializer`; JSON by default).
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ._errors import PayloadError, SerializationError
from ._frozen import quick_init
from ._serializer import JSONSerializer, Serializer, key_not_text

__all__ = [
    "Claimed",
    "Claims",
    "DeadJob",
    "Envelope",
    "Info",
    "JobStatus",
    "KeyInfo",
    "Message",
    "Outcome",
    "QueueInfo",
    "TRACEBACK_KEPT",
    "WorkerInfo",
    "decode",
    "encode",
    "new_id",
]

OutcomeKind = Literal["done", "retry", "dead", "release"]

#: Characters of a failure's traceback a retrying job's payload keeps (its end:
#: where it was raised); the dead set keeps the whole traceback.
TRACEBACK_KEPT = 8000


def new_id() -> str:
    """A fresh job id (32 hex characters)."""
    return uuid.uuid4().hex


@dataclass(slots=True)
class Message:
    """A decoded job: what to run, with what, and how often it failed so far."""

    id: str
    queue: str
    job: str
    args: list[Any]
    kwargs: dict[str, Any]
    attempt: int = 0
    enqueued_at: float = field(default_factory=time.time)
    retries: int | None = None  # per-enqueue override of the job type's retries
    error: str | None = None  # the last failure, kept for the dead set and `batchy info`
    # Its traceback (the end of it), so an operator sees why a retrying job failed.
    traceback: str | None = None
    cancelled: bool = False  # an operator cancelled its last run (it is in the dead set)
    # Metadata that travels with the job, written by job hooks at enqueue (say, the
    # W3C ``traceparent`` of the trace that enqueued it); stores never read it.
    headers: dict[str, str] = field(default_factory=dict)


def encode(message: Message, serializer: Serializer, *, check_keys: bool = True) -> str:
    """The payload string of ``message``; raises :class:`SerializationError` naming the job.

    ``check_keys=False`` for a message already enqueued (a failure being noted):
    its arguments were checked then, or came back from JSON, and the failure of
    a run must be recorded whatever the handler did to them.
    """
    body: dict[str, Any] = {
        "job": message.job,
        "args": message.args,
        "kwargs": message.kwargs,
        "attempt": message.attempt,
        "enqueued_at": message.enqueued_at,
    }
    if message.retries is not None:
        body["retries"] = message.retries
    if message.error is not None:
        body["error"] = message.error
    if message.traceback is not None:
        body["traceback"] = message.traceback[-TRACEBACK_KEPT:]
    if message.cancelled:
        body["cancelled"] = True
    if message.headers:
        body["headers"] = message.headers
    if check_keys and type(serializer) is JSONSerializer:
        _text_keys(message)
    try:
        return serializer.dumps(body)
    except (TypeError, ValueError) as error:
        raise SerializationError(
            f"job {message.job!r} (queue {message.queue!r}) cannot be enqueued: its "
            f"arguments do not serialize with {type(serializer).__name__} ({error}); "
            "pass plain JSON values (str, int, float, bool, None, lists, dicts with str "
            "keys), e.g. an id instead of an object; nothing was enqueued"
        ) from error


def _text_keys(message: Message) -> None:
    where = key_not_text(message.args, "args") or key_not_text(message.kwargs, "kwargs")
    if where is not None:
        raise SerializationError(
            f"job {message.job!r} (queue {message.queue!r}) cannot be enqueued: {where}, "
            "and JSON keeps only text keys, so the handler would get it as a str; use str "
            "keys, or pass a list of [key, value] pairs; nothing was enqueued"
        )


def decode(claimed: Claimed, serializer: Serializer) -> Message:
    """The message in a claimed payload; raises :class:`PayloadError` saying what is wrong."""
    try:
        body = serializer.loads(claimed.payload)
    except Exception as error:
        raise PayloadError(
            f"job {claimed.id} on queue {claimed.queue!r}: payload {claimed.payload[:80]!r} "
            f"cannot be decoded by {type(serializer).__name__} ({error}); enqueue jobs "
            "through batchy.jobs (or write the same JSON shape) rather than by hand"
        ) from error
    ok = isinstance(body, dict)
    if ok:  # each field read once: this runs for every job a worker takes
        get = body.get
        job, args, kwargs = get("job"), get("args", []), get("kwargs", {})
        attempt = get("attempt", 0)
        ok = (
            isinstance(job, str)
            and isinstance(args, list)
            and isinstance(kwargs, dict)
            and isinstance(attempt, int)
        )
    if not ok:
        raise PayloadError(
            f"job {claimed.id} on queue {claimed.queue!r}: payload {claimed.payload[:80]!r} "
            "is not a job (expected an object with 'job' (str), 'args' (list), 'kwargs' "
            "(object), 'attempt' (int)); enqueue jobs through batchy.jobs"
        )
    # Metadata of the wrong type is dropped, never fatal: what a job runs is above.
    retries, at = get("retries"), get("enqueued_at", 0.0)
    last_error, traceback, headers = get("error"), get("traceback"), get("headers")
    return Message(
        claimed.id,
        claimed.queue,
        job,
        args,
        kwargs,
        attempt,
        _seconds(at),
        retries if isinstance(retries, int) else None,
        last_error if isinstance(last_error, str) else None,
        traceback if isinstance(traceback, str) else None,
        get("cancelled") is True,
        _headers(headers) if headers else {},
    )


def _seconds(value: Any) -> float:
    """A payload's time as a finite float; anything else (a string, 1e400) is 0.0."""
    if type(value) is float:  # as encode() writes it: one test per job, not three
        return value if math.isfinite(value) else 0.0
    if not isinstance(value, (int, float)):
        return 0.0
    try:
        seconds = float(value)
    except OverflowError:  # an int past float's range
        return 0.0
    return seconds if math.isfinite(seconds) else 0.0


def _headers(value: Any) -> dict[str, str]:
    """A payload's headers; anything but an object of strings is dropped, never fatal."""
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


@dataclass(frozen=True, slots=True)
class Envelope:
    """An encoded job on its way into a store.

    ``due`` is a Unix time on the caller's clock (``None``: now): the store keeps
    only its offset from the ``now`` of the push, so the job falls due that many
    seconds later on the store's clock, whatever the caller's clock says.
    ``unique`` makes the enqueue happen at most once per key for ``unique_ttl``
    seconds, whoever tries (periodic ticks).
    ``key`` orders the job: of the jobs sharing a key, only the oldest (in push
    order) may be claimed, and only when no other job of the key is running.
    A key (ordering or unique) is non-empty text: ``None`` means none.
    """

    id: str
    queue: str
    payload: str
    due: float | None = None
    unique: str | None = None
    unique_ttl: float = 0.0
    key: str | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class Claimed:
    """A job a worker holds a lease on.

    ``token`` is the lease token (a fencing token) the store wrote at this claim,
    never the same for two claims of one job: the heartbeats, outcome and progress
    saves of this run carry it, and the store applies them only while the job's
    token is still this one.
    """

    id: str
    queue: str
    payload: str
    token: str = ""


class Claims(list[Claimed]):
    """What :meth:`Backend.cycle` returns: the jobs it claimed, in order.

    ``refused`` lists the ids of the outcomes it did not apply because their
    token no longer held (the lease had moved to another worker, or the job had
    left): only the lease holder's word counts. ``cancel`` lists the ``(id, lease
    token)`` claims of the calling worker that an operator asked to cancel
    (:meth:`Backend.act`); the worker stops their runs.
    """

    def __init__(
        self,
        claimed: Iterable[Claimed] = (),
        refused: Iterable[str] = (),
        cancel: Iterable[tuple[str, str]] = (),
    ) -> None:
        super().__init__(claimed)
        self.refused: list[str] = list(refused)
        self.cancel: list[tuple[str, str]] = list(cancel)


@quick_init
@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of a claimed job; a store applies many of them in one round trip.

    - ``done``: remove it; keep ``result`` (a payload string) for ``keep`` seconds.
    - ``retry``: run it again at ``due`` with the new ``payload``.
    - ``dead``: move it to the dead set with ``reason`` and ``traceback`` (and
      ``payload``; ``None`` keeps the one it was claimed with; so does ``queue=''``).
    - ``release``: give it back to its queue now, unchanged (shutdown).

    ``token`` is the :attr:`Claimed.token` of the run it reports on; an outcome
    whose token no longer holds is refused. ``due`` is on the caller's clock (the
    ``now`` of the cycle that carries it): the store keeps only its offset.
    """

    id: str
    kind: OutcomeKind
    queue: str = ""
    payload: str | None = None
    due: float = 0.0
    result: str | None = None
    keep: float = 0.0
    reason: str = ""
    traceback: str = ""
    token: str = ""

    def with_token(self, token: str) -> Outcome:
        """This outcome for the claim holding lease token ``token`` (a fast ``replace``)."""
        return Outcome(
            self.id,
            self.kind,
            self.queue,
            self.payload,
            self.due,
            self.result,
            self.keep,
            self.reason,
            self.traceback,
            token,
        )


@dataclass(frozen=True, slots=True)
class JobStatus:
    """Where a job is: ``queued``, ``scheduled``, ``running``, ``retrying``, ``done``,
    ``dead`` or ``unknown`` (never enqueued, or done and its result not kept)."""

    id: str
    state: str
    result: str | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class DeadJob:
    """A job that will not run again unless retried by hand."""

    id: str
    queue: str
    payload: str
    reason: str
    traceback: str
    died_at: float
    key: str | None = None  # the ordering key it held up until it died


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A live worker as ``batchy info`` shows it."""

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    running: tuple[str, ...] = ()
    started_at: float = 0.0

    def to_json(self) -> str:
        return json.dumps(
            {
                "id": self.id,
                "host": self.host,
                "pid": self.pid,
                "queues": list(self.queues),
                "concurrency": self.concurrency,
                "running": list(self.running),
                "started_at": self.started_at,
            }
        )

    @classmethod
    def from_json(cls, data: str) -> WorkerInfo:
        d = json.loads(data)
        return cls(
            id=d["id"],
            host=d["host"],
            pid=d["pid"],
            queues=tuple(d["queues"]),
            concurrency=d["concurrency"],
            running=tuple(d["running"]),
            started_at=d["started_at"],
        )


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """Counts for one queue; ``latency`` is the age in seconds of its oldest ready job."""

    name: str
    size: int
    latency: float
    running: int
    scheduled: int
    retrying: int


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """One ordering key with jobs: how many, and what its head (the oldest job) is doing.

    ``state`` is the head's: ``running``, ``queued``, ``retrying`` (the key waits
    for the retry), ``scheduled`` (a delayed head) or ``expired`` (its worker died;
    the next cycle gives it back). ``since``: for ``retrying`` and ``scheduled``,
    the Unix time the head is due; for ``expired``, when its lease ran out.
    """

    key: str
    queue: str
    jobs: int
    head: str
    state: str
    since: float = 0.0

    @classmethod
    def of_head(
        cls,
        key: str,
        queue: str,
        jobs: int,
        head: str,
        *,
        running: bool,
        lease: float,
        due: float,
        retrying: bool,
        now: float,
    ) -> KeyInfo:
        """A key's info from what a store knows about its head job."""
        if running:
            state, since = ("expired", lease) if lease < now else ("running", 0.0)
        elif due > now:
            state, since = ("retrying" if retrying else "scheduled"), due
        else:
            state, since = "queued", due
        return cls(key, queue, jobs, head, state, since)

    @property
    def stalled(self) -> bool:
        """True when the key cannot move on now (its head is backing off or orphaned)."""
        return self.state in ("retrying", "expired")


@dataclass(frozen=True, slots=True)
class Info:
    """A snapshot of a store: its queues, its dead set and its live workers."""

    queues: tuple[QueueInfo, ...]
    dead: int
    workers: tuple[WorkerInfo, ...]
