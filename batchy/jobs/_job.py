"""A job type (a handler plus its options) and a call of it that is ready to enqueue."""

from __future__ import annotations

import datetime as dt
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar

import batchy

from ._errors import ArgumentError, JobDefinitionError
from ._guard import guard
from ._handle import Handle, Store
from ._model import Message, new_id
from ._retry import DEFAULT_RETRIES, Backoff, sidekiq_backoff
from ._screen import QUEUE_CHARS
from ._times import MAX_SPAN, check_at, check_delay, span_problem

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["JobCall", "JobType", "Owner", "check_queue_name"]

_UNCHECKED: Any = object()

P = ParamSpec("P")
T = TypeVar("T")


def check_queue_name(name: object, what: str) -> str:
    """``name`` if it is a usable queue name; a :class:`JobDefinitionError` otherwise."""
    if not isinstance(name, str) or not name or not QUEUE_CHARS.issuperset(name):
        raise JobDefinitionError(
            f"{what}: queue name {name!r} is not valid; use letters, digits and _-.: "
            "(e.g. 'default', 'critical')"
        )
    return name


class Owner(Store, Protocol):
    """What a job type needs of the :class:`~batchy.jobs.Queue` that declared it.

    A protocol rather than the class, so job types sit below the queue: the queue
    builds job types, never the other way round.
    """

    @property
    def default_queue(self) -> str: ...
    @property
    def keep_result(self) -> float: ...
    async def enqueue_many(
        self, calls: Iterable[JobCall], *, connection: Any = None
    ) -> list[Handle]: ...
    def enqueue_many_sync(
        self, calls: Iterable[JobCall], *, connection: Any = None
    ) -> list[Handle]: ...
    def _announce(self, message: Message) -> None: ...


#: The keyword arguments of :meth:`JobType.options`, for a mistake's message.
_OPTION_NAMES = ("delay", "at", "retries", "queue", "id", "key", "connection")


@dataclass(frozen=True, slots=True)
class JobCall:
    """One call of a job type with its arguments and enqueue options, not yet enqueued."""

    job: JobType[Any, Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    delay: float | None = None
    at: float | None = None
    retries: int | None = None
    queue: str | None = None
    id: str | None = None
    attempt: int = field(default=0)
    key: str | int | None = None
    # The application's connection whose transaction the job joins (not stored).
    connection: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        # Every enqueue builds a JobCall, so a bad delay or time stops here, before
        # anything reaches a store (where one NaN fails the whole round trip).
        what = f"job {self.job.name!r}"
        if self.delay is not None:
            object.__setattr__(self, "delay", check_delay(self.delay, what))
        if self.at is not None:
            object.__setattr__(self, "at", check_at(self.at, what))

    def message(self, now: float) -> Message:
        return Message(
            id=self.id or new_id(),
            queue=self.queue or self.job.queue_name,
            job=self.job.name,
            args=list(self.args),
            kwargs=dict(self.kwargs),
            attempt=self.attempt,
            enqueued_at=now,
            retries=self.retries,
        )

    def due(self, now: float) -> float | None:
        if self.at is not None:
            return self.at
        if self.delay is not None and self.delay > 0:
            return now + self.delay
        return None

    async def enqueue(self) -> Handle:
        """Enqueue this call; returns its :class:`Handle`."""
        (handle,) = await self.job.queue.enqueue_many([self], connection=self.connection)
        return handle

    def enqueue_sync(self) -> Handle:
        """Enqueue this call from code without an event loop."""
        (handle,) = self.job.queue.enqueue_many_sync([self], connection=self.connection)
        return handle


class _Options(Generic[P]):
    """Enqueue options bound to a job type: ``job.options(delay=60).enqueue(...)``."""

    def __init__(self, job: JobType[P, Any], template: JobCall) -> None:
        self._job = job
        self._template = template

    def call(self, *args: P.args, **kwargs: P.kwargs) -> JobCall:
        return replace(self._template, args=args, kwargs=kwargs)

    async def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Handle:
        return await self.call(*args, **kwargs).enqueue()

    def enqueue_sync(self, *args: P.args, **kwargs: P.kwargs) -> Handle:
        return self.call(*args, **kwargs).enqueue_sync()


class JobType(Generic[P, T]):
    """A handler declared with :meth:`Queue.job`. Enqueue it, or call it to run it here."""

    def __init__(
        self,
        owner: Owner,
        fn: Callable[P, Any],
        *,
        name: str | None = None,
        queue: str | None = None,
        retries: int = DEFAULT_RETRIES,
        timeout: float | None = None,
        backoff: Backoff = sidekiq_backoff,
        keep_result: float | None = None,
        ordered_by: str | Callable[..., Any] | None = None,
        order_group: str | None = None,
        **unknown: Any,
    ) -> None:
        label = getattr(fn, "__qualname__", repr(fn))
        if unknown:
            raise JobDefinitionError(
                f"job {label!r}: unknown option(s) {sorted(unknown)}; the options are name, "
                "queue, retries, timeout, backoff, keep_result, ordered_by, order_group"
            )
        if type(retries) is not int or retries < 0:
            raise JobDefinitionError(
                f"job {label!r}: retries={retries!r} must be an int >= 0 (0: never retry)"
            )
        if keep_result is not None and span_problem(keep_result) is not None:
            raise JobDefinitionError(
                f"job {label!r}: keep_result={keep_result!r} must be a finite number of "
                f"seconds >= 0 and at most ten years, {MAX_SPAN:,} (0: results are not kept)"
            )
        if timeout is not None and not timeout > 0:
            raise JobDefinitionError(
                f"job {label!r}: timeout={timeout!r} must be a positive number of seconds or None"
            )
        if not callable(backoff):
            raise JobDefinitionError(
                f"job {label!r}: backoff={backoff!r} must be a function "
                "(retries_done, error) -> seconds"
            )
        self.queue = owner
        self.fn = fn
        self.handler: batchy.TaskFunction[P, T] = batchy.task(fn)
        # What workers run: the same handler, its SystemExit a failed attempt.
        guarded = guard(fn)
        self.guarded: batchy.TaskFunction[P, T] = batchy.task(guarded)
        # An async def handler is awaited by its run's own task (see _runner).
        self.guarded_coroutine: Callable[..., Awaitable[T]] | None = (
            guarded if inspect.iscoroutinefunction(fn) else None
        )
        self.name = name or f"{fn.__module__}.{label}"
        self.queue_name = check_queue_name(queue or owner.default_queue, f"job {self.name!r}")
        self.retries = retries
        self.timeout = timeout
        self.backoff = backoff
        self.keep_result = owner.keep_result if keep_result is None else keep_result
        self.ordered_by = ordered_by
        # Set by job kinds built on jobs (sharded jobs): the handler's first
        # argument is then the :class:`Running` job, so it can save progress.
        self.takes_running = False
        self.order_group = order_group or self.name
        try:
            self.parameters: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):  # some callables have no signature: nothing to check
            self.parameters = None
        self._bindings: dict[tuple[Any, ...], str | None] = {}
        self._signature: inspect.Signature | None = None
        if isinstance(ordered_by, str):
            self._signature = inspect.signature(fn)
            if ordered_by not in self._signature.parameters:
                raise JobDefinitionError(
                    f"job {self.name!r}: ordered_by={ordered_by!r} names no parameter of the "
                    f"handler (it takes {list(self._signature.parameters)}); name one, or pass "
                    "a function of the arguments, e.g. ordered_by=lambda post_id, **_: post_id"
                )
        elif ordered_by is not None and not callable(ordered_by):
            raise JobDefinitionError(
                f"job {self.name!r}: ordered_by={ordered_by!r} must be a parameter name or a "
                "function of the job's arguments returning its key (a str or int)"
            )

    def __repr__(self) -> str:
        return f"<batchy.jobs.JobType {self.name} queue={self.queue_name}>"

    def binding_problem(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        """Why the handler cannot take ``args`` and ``kwargs`` (Python's words), or None."""
        if self.parameters is None:
            return None
        # Whether arguments bind depends only on how many positional ones there
        # are and the keywords' names, never on values: check each shape once
        # (the worker checks every job it runs, and Signature.bind is slow).
        shape = (self.takes_running, len(args), *kwargs)
        known = self._bindings.get(shape, _UNCHECKED)
        if known is not _UNCHECKED:
            return known  # type: ignore[no-any-return]
        try:
            if self.takes_running:
                self.parameters.bind(None, *args, **kwargs)
            else:
                self.parameters.bind(*args, **kwargs)
            problem = None
        except TypeError as error:
            problem = str(error)
        if len(self._bindings) < 64:  # a few shapes per job type in practice
            self._bindings[shape] = problem
        return problem

    def describe_parameters(self) -> str:
        """The handler's parameters as a message shows them: ``(tag, *, force=False)``."""
        if self.parameters is None:
            return "(?)"
        bare = [p.replace(annotation=p.empty) for p in self.parameters.parameters.values()]
        return str(
            self.parameters.replace(parameters=bare, return_annotation=inspect.Signature.empty)
        )

    def check_arguments(self, call: JobCall) -> None:
        """Raise :class:`ArgumentError` unless the handler can take ``call``'s arguments."""
        problem = self.binding_problem(call.args, call.kwargs)
        if problem is not None:
            raise ArgumentError(
                f"job {self.name!r} cannot take args={call.args!r} kwargs={call.kwargs!r}: "
                f"{problem}; its handler takes {self.describe_parameters()}"
                f"{self._options_hint(call.kwargs)}; nothing was enqueued"
            )

    def _options_hint(self, kwargs: Mapping[str, Any]) -> str:
        """Where enqueue options passed as the handler's arguments go: ``options(...)``."""
        taken = () if self.parameters is None else self.parameters.parameters
        given = [name for name in kwargs if name in _OPTION_NAMES and name not in taken]
        if not given:
            return ""
        spelled = ", ".join(f"{name}=..." for name in given)
        job = getattr(self.fn, "__name__", "job")
        return (
            f"; {spelled} {'is an enqueue option' if len(given) == 1 else 'are enqueue options'}"
            f", not the handler's: {job}.options({spelled}).enqueue(...)"
        )

    def order_key(self, call: JobCall) -> str | None:
        """The ordering key a call is stored under (``group:value``), or None if unordered."""
        value: Any = call.key
        if value is None and self.ordered_by is not None:
            try:
                if self._signature is not None:
                    bound = self._signature.bind(*call.args, **call.kwargs)
                    bound.apply_defaults()
                    value = bound.arguments[str(self.ordered_by)]
                elif callable(self.ordered_by):
                    value = self.ordered_by(*call.args, **call.kwargs)
            except Exception as error:
                raise JobDefinitionError(
                    f"job {self.name!r}: cannot find its ordering key in args={call.args!r} "
                    f"kwargs={call.kwargs!r} ({type(error).__name__}: {error}); ordered_by "
                    "receives the job's arguments, e.g. ordered_by=lambda post_id, **_: post_id"
                ) from error
            if value is None:
                raise JobDefinitionError(
                    f"job {self.name!r} is ordered, but ordered_by gave None for "
                    f"args={call.args!r} kwargs={call.kwargs!r}; return the key (a str or "
                    "int), or enqueue with .options(key=...)"
                )
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise JobDefinitionError(
                f"job {self.name!r}: ordering key {value!r} is a {type(value).__name__}; a key "
                "must be a str or an int (e.g. the post's id), nothing was enqueued"
            )
        return f"{self.order_group}:{value}"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> batchy.Task[T]:
        """Run the handler here and now (as a batchy task), without the queue."""
        return self.handler(*args, **kwargs)

    def call(self, *args: P.args, **kwargs: P.kwargs) -> JobCall:
        """This job with these arguments, for :meth:`Queue.enqueue_many`."""
        return JobCall(self, args, kwargs)

    async def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Handle:
        """Enqueue one job; arguments must serialize (JSON by default) or nothing is enqueued."""
        return await self.call(*args, **kwargs).enqueue()

    def enqueue_sync(self, *args: P.args, **kwargs: P.kwargs) -> Handle:
        """:meth:`enqueue` for code without an event loop (a Flask view, a Django signal)."""
        return self.call(*args, **kwargs).enqueue_sync()

    def options(
        self,
        *,
        delay: float | None = None,
        at: float | dt.datetime | None = None,
        retries: int | None = None,
        queue: str | None = None,
        id: str | None = None,
        key: str | int | None = None,
        connection: Any = None,
    ) -> _Options[P]:
        """Enqueue options for one call: ``await job.options(delay=60).enqueue(x)``.

        ``delay`` in seconds (finite, >= 0) or ``at`` a Unix time or an aware
        ``datetime``; a bad one raises :class:`DelayError`. ``retries`` overrides the job
        type's; ``queue`` sends it to another queue; ``id`` sets the job id; ``key``
        orders it after every job already enqueued with the same key (and group).
        ``connection`` (PostgreSQL and SQLite stores) writes the job inside that
        connection's open transaction: it exists, and runs, only if that commits.
        """
        if delay is not None and at is not None:
            raise JobDefinitionError(
                f"job {self.name!r}: pass delay= or at=, not both (at={at!r} is a Unix time, "
                f"delay={delay!r} seconds from now)"
            )
        if at is not None:
            at = check_at(at, f"job {self.name!r}")
        if at is not None and at > time.time() + 10 * 365 * 86400:
            raise JobDefinitionError(
                f"job {self.name!r}: at={at!r} is more than 10 years away; at= takes a Unix "
                "time in seconds (time.time() + 60), not milliseconds"
            )
        if retries is not None and (type(retries) is not int or retries < 0):
            raise JobDefinitionError(f"job {self.name!r}: retries={retries!r} must be an int >= 0")
        if queue is not None:
            check_queue_name(queue, f"job {self.name!r}")
        if id is not None and (type(id) is not str or not id):
            raise JobDefinitionError(
                f"job {self.name!r}: id={id!r} must be a non-empty str (a job's id in the "
                f"store, e.g. id=f'invoice-{{n}}'); nothing was enqueued"
            )
        return _Options(
            self,
            JobCall(self, (), {}, delay, at, retries, queue, id, key=key, connection=connection),
        )
