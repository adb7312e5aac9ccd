"""Django: a batchy scope per request (sync and async views), ``run`` for sync views, ORM loaders.

::

    # settings.py
    MIDDLEWARE = [..., "batchy_contrib.web.django.BatchyMiddleware"]
    BATCHY = {"LOG": True, "HEADER": "X-Batchy"}        # both optional

    # loaders.py
    from batchy_contrib.web.django import fk_loader, model_loader
    users_by_id = model_loader(User)                    # User.objects.in_bulk(ids)
    comments_by_post = fk_loader(Comment, "post")       # Comment.objects.filter(post__in=ids)

    # views.py
    from batchy_contrib.web.django import run
    def post_page(request, pid):                        # a sync view
        return JsonResponse(run(post_view(pid)))
    async def post_page_async(request, pid):            # an async view (ASGI)
        return JsonResponse(await post_view(pid))

Django's ORM is sync, and refuses to run in a thread where an event loop runs
(``SynchronousOnlyOperation``). So the ORM loaders never query on the loop:

- under :func:`run` (sync views, scripts, tests) the loop runs in a helper
  thread and each batch query runs back in the calling thread, on its database
  connection and inside its transaction (``atomic``, ``TestCase``);
- in async code (an async view, under ASGI or WSGI), each batch query runs with
  ``sync_to_async(thread_sensitive=True)``, as Django advises.

``batchy.run`` in a view served through :class:`BatchyMiddleware` would make
the ORM wait for the thread that waits for it: the loaders fail with
:class:`DjangoLoopError`, which names the fix.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
)
from typing import Any, TypeVar

from .._extras import extra

with extra(__name__, "'batchy[django]'", "asgiref", "django"):
    from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
    from django.conf import settings

import batchy

from .request_stats import (
    NOT_A_HEADER,
    RequestStats,
    Served,
    current_stats,
    is_header_name,
    serving,
    track,
)
from .request_stats import run as run_in_request

__all__ = [
    "BatchyMiddleware",
    "DjangoLoopError",
    "DjangoSettingsError",
    "RequestStats",
    "current_stats",
    "fk_loader",
    "model_loader",
    "run",
]

T = TypeVar("T")
_SETTINGS = {"LOG": False, "HEADER": None}

# Set by run(): where batch queries go to run in the calling thread.
_jobs: contextvars.ContextVar[queue.SimpleQueue[Callable[[], None] | None] | None] = (
    contextvars.ContextVar("batchy_django_jobs", default=None)
)
# Set by the middleware for a sync request: the thread that serves it.
_sync_thread: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "batchy_django_sync_thread", default=None
)
# Set by the middleware for an async request: the server's loop, where
# sync_to_async(thread_sensitive=True) is the right way to reach the ORM.
_server_loop: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = contextvars.ContextVar(
    "batchy_django_server_loop", default=None
)


class DjangoSettingsError(batchy.UsageError):
    """``settings.BATCHY`` has an unknown key or a value of the wrong type."""


class DjangoLoopError(batchy.UsageError):
    """A Django ORM loader was called on an event loop where the ORM cannot run."""


def _settings() -> dict[str, Any]:
    given = getattr(settings, "BATCHY", {})
    if not isinstance(given, dict) or set(given) - set(_SETTINGS):
        raise DjangoSettingsError(
            f"settings.BATCHY must be a dict with keys among {sorted(_SETTINGS)}, got "
            f"{batchy.short_repr(given)}"
        )
    merged = {**_SETTINGS, **given}
    if merged["HEADER"] not in (None, "") and not is_header_name(merged["HEADER"]):
        raise DjangoSettingsError(
            f"settings.BATCHY['HEADER']={batchy.short_repr(merged['HEADER'])} {NOT_A_HEADER}; "
            "e.g. 'X-Batchy'"
        )
    return merged


class BatchyMiddleware:
    """Runs each request in a batchy scope of its own; ``request.batchy`` holds its stats.

    Works for sync (WSGI) and async (ASGI) stacks alike: Django calls it the way
    the stack around it runs.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response
        config = _settings()
        self.log = bool(config["LOG"])
        self.header: str | None = config["HEADER"]
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: Any) -> Any:
        if self.is_async:
            return self._acall(request)
        with track(f"{request.method} {request.path}", log_stats=self.log) as stats:
            request.batchy = stats
            token = _sync_thread.set(threading.get_ident())
            try:
                response = self.get_response(request)
            finally:
                _sync_thread.reset(token)
        return self._with_header(response, stats)

    async def _acall(self, request: Any) -> Any:
        with track(f"{request.method} {request.path}", log_stats=self.log) as stats:
            request.batchy = stats
            token = _server_loop.set(asyncio.get_running_loop())
            try:
                response = await self.get_response(request)
            finally:
                _server_loop.reset(token)
        return self._with_header(response, stats)

    def _with_header(self, response: Any, stats: RequestStats) -> Any:
        if self.header:
            response[self.header] = stats.summary()  # (a streamed body's loads come after)
        if getattr(response, "streaming", False):
            # The server reads a streamed body after the view returned: its loads
            # run in the request's scope (and cache) still, as the view's did.
            content = response.streaming_content
            if hasattr(content, "__aiter__"):
                response.streaming_content = _served_async(content, stats)
            else:
                response.streaming_content = Served(content, stats)
        return response


async def _served_async(content: AsyncIterable[Any], stats: RequestStats) -> AsyncIterator[Any]:
    chunks = aiter(content)
    while True:
        with serving(stats):
            chunk = await anext(chunks, _END)
        if chunk is _END:
            return
        yield chunk


_END: Any = object()


def run(aw: Awaitable[T]) -> T:
    """Run a handler from sync code (a view, a command, a test), its ORM queries in this thread.

    The event loop runs in a helper thread for the duration of the call; each
    batch query of an ORM loader is sent back here, so it uses this thread's
    database connection and transaction. Inside a request it uses the
    request's scope and stats.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise batchy.UsageError(
            "batchy_contrib.web.django.run() was called while an event loop is running in this "
            "thread; in an async view, 'await' the handler instead"
        )
    jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
    context = contextvars.copy_context()
    context.run(_jobs.set, jobs)
    out: list[T] = []
    failed: list[BaseException] = []

    def loop_thread() -> None:
        try:
            out.append(context.run(run_in_request, aw))
        except BaseException as error:
            failed.append(error)
        finally:
            jobs.put(None)  # wake the calling thread even when the run failed

    helper = threading.Thread(target=loop_thread, name="batchy-django-run", daemon=True)
    helper.start()
    while (job := jobs.get()) is not None:
        job()  # a batch query, here, where Django's ORM may run
    helper.join()
    if failed:
        raise failed[0]
    return out[0]


def _orm_batch(name: str, fetch: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
    """A batch function that runs ``fetch`` wherever Django's ORM may run (see the module doc)."""

    async def batch(keys: list[Any]) -> Any:
        loop = asyncio.get_running_loop()
        jobs = _jobs.get()
        if jobs is not None:
            done: asyncio.Future[Any] = loop.create_future()

            def job() -> None:
                try:
                    value = fetch(keys)
                except BaseException as error:
                    loop.call_soon_threadsafe(_settle, done, None, error)
                else:
                    loop.call_soon_threadsafe(_settle, done, value, None)

            jobs.put(job)
            return await done
        if _misplaced(loop):
            raise DjangoLoopError(
                f"{name}: Django's ORM cannot run on this event loop: batchy.run() started it "
                "in the thread of a sync view, which is waiting for it. Run the handler with "
                "batchy_contrib.web.django.run(...) instead of batchy.run(...); in an async view, "
                "await it."
            )
        # An async view (ASGI, or WSGI through asgiref), or async code outside a
        # request: the thread-sensitive executor is where Django wants the ORM.
        return await sync_to_async(fetch, thread_sensitive=True)(keys)

    return batch


def _misplaced(loop: asyncio.AbstractEventLoop) -> bool:
    """Is ``loop`` one that ``batchy.run`` started inside a sync view (where the ORM would hang)?"""
    server = _server_loop.get()
    if server is not None:  # an ASGI request: only the server's loop may reach the ORM
        return server is not loop
    # A WSGI request: a loop in the request's own thread was started by code
    # the view called and waits for; asgiref runs async views in another thread.
    return _sync_thread.get() == threading.get_ident()


def _settle(done: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if done.done():  # the batch was cancelled meanwhile
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(value)


def model_loader(model: Any, *, field: str = "pk", **options: Any) -> batchy.Loader[Any, Any]:
    """A loader of ``model`` instances by ``field`` (the primary key by default), over ``in_bulk``.

    A key with no row loads as ``None``. Other keyword arguments go to
    :func:`batchy.batched` (``max_batch_size=``, ``cache=``, ``name=``).
    """
    name = options.pop("name", f"{model._meta.label}.{field}")
    manager = model._default_manager

    def fetch(keys: list[Any]) -> dict[Any, Any]:
        return dict(
            manager.in_bulk(keys, field_name=field) if field != "pk" else manager.in_bulk(keys)
        )

    options.setdefault("default", None)
    return batchy.batched(_orm_batch(name, fetch), name=name, **options)


def fk_loader(model: Any, field: str, **options: Any) -> batchy.Loader[Any, Any]:
    """A loader of the ``model`` rows whose foreign key ``field`` points at each key, as lists.

    ``fk_loader(Comment, "post")(post_id)`` is the list of that post's comments,
    in the model's default ordering (else by primary key), one query per batch.
    """
    related = model._meta.get_field(field)
    attname = related.attname  # "post_id": read the key without loading the post
    name = options.pop("name", f"{model._meta.label}.{field}")
    ordering = list(model._meta.ordering) or ["pk"]
    manager = model._default_manager

    def fetch(keys: list[Any]) -> list[list[Any]]:
        found: dict[Any, list[Any]] = {key: [] for key in keys}
        for row in manager.filter(**{f"{attname}__in": keys}).order_by(*ordering):
            found[getattr(row, attname)].append(row)
        return [found[key] for key in keys]

    return batchy.batched(_orm_batch(name, fetch), name=name, **options)
