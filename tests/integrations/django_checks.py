"""Django checks that need settings of their own: run as a script by test_django.py, prints "ok"."""
# ruff: noqa: E402  (Django must be configured before its models and loaders are imported)

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples/integrations/django_blog"))

import django
from django.conf import settings

settings.configure(
    INSTALLED_APPS=["blog"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    BATCHY={"LOG": False},
)
django.setup()

from django.core.management import call_command
from django.db import transaction
from django.http import HttpResponse, StreamingHttpResponse
from django.test import RequestFactory

import batchy
from batchy_contrib.web import django as bd

call_command("migrate", run_syncdb=True, verbosity=0)
from blog.loaders import authors_by_id, post_view
from blog.models import Author, Comment, Post


def expect(error_type: type[BaseException], text: str, fn: object) -> None:
    try:
        fn()  # type: ignore[operator]
    except error_type as error:
        assert text in str(error), str(error)
    else:
        raise AssertionError(f"no {error_type.__name__}")


# run() sends the batch queries back to this thread: they see this transaction.
with transaction.atomic():
    Author.objects.create(id=1, name="ada")
    Post.objects.create(id=1, title="hello", author_id=1)
    Comment.objects.create(id=1, post_id=1, body="hi", author_id=1)
    assert bd.run(post_view(1)) == {
        "id": 1,
        "title": "hello",
        "author": "ada",
        "comments": [{"body": "hi", "author": "ada"}],
    }
assert bd.run(authors_by_id(99)) is None  # no row: None, as in_bulk leaves it out

# batchy.run inside a sync view served by the middleware: batchy's error, by name, with the fix.
seen: list[str] = []


def view(request: object) -> HttpResponse:
    try:
        batchy.run(authors_by_id(1))
    except batchy.LoaderError as error:  # the engine wraps what a batch function raised
        assert isinstance(error.__cause__, bd.DjangoLoopError)
        seen.append(str(error.__cause__))
    return HttpResponse("done")


bd.BatchyMiddleware(view)(RequestFactory().get("/"))
[message] = seen
assert message.startswith("blog.Author.pk: Django's ORM cannot run on this event loop"), message
assert "batchy_contrib.web.django.run(...) instead of batchy.run(...)" in message


# A streamed body is read by the server after the view returned: its loads ran
# outside the request's scope (no cache of the view's, no request stats).
calls: list[list[int]] = []


@batchy.batched(name="users")
async def users(ids: list[int]) -> list[str]:
    calls.append(list(ids))
    return [f"user {i}" for i in ids]


def streamed(request: object) -> StreamingHttpResponse:
    bd.run(users(1))

    def body() -> Iterator[bytes]:
        assert bd.current_stats() is request.batchy  # type: ignore[attr-defined]
        yield bd.run(users(1)).encode()  # the view's cache answers

    return StreamingHttpResponse(body())


response = bd.BatchyMiddleware(streamed)(RequestFactory().get("/s"))
assert b"".join(response.streaming_content) == b"user 1"
assert calls == [[1]], calls


# A path with a line break (GET /feed%0D%0AX-Evil:%201): the X-Batchy header of its
# summary made Django raise BadHeaderError, so the request was a 500.
settings.BATCHY = {"HEADER": "X-Batchy"}
response = bd.BatchyMiddleware(view)(RequestFactory().get("/feed%0D%0AX-Evil:%201"))
assert response.content == b"done", response
assert response["X-Batchy"].startswith("GET /feed\\r\\nX-Evil: 1: 0 rounds"), response["X-Batchy"]
assert "X-Evil" not in response.headers
settings.BATCHY = {"LOG": False}


async def in_async() -> None:
    expect(batchy.UsageError, "in an async view, 'await' the handler", lambda: bd.run(post_view(1)))


asyncio.run(in_async())

settings.BATCHY = {"LOGS": True}
expect(
    bd.DjangoSettingsError,
    "settings.BATCHY must be a dict with keys among",
    lambda: bd.BatchyMiddleware(view),
)
settings.BATCHY = {"HEADER": 1}
expect(
    bd.DjangoSettingsError,
    "settings.BATCHY['HEADER']=1 is not an HTTP header name",
    lambda: bd.BatchyMiddleware(view),
)
settings.BATCHY = {"HEADER": "X Batchy"}  # taken, and then uvicorn sent no response at all
expect(
    bd.DjangoSettingsError,
    "settings.BATCHY['HEADER']='X Batchy' is not an HTTP header name (ASCII letters, digits "
    "and !#$%&'*+-.^_`|~, no spaces or colons); e.g. 'X-Batchy'",
    lambda: bd.BatchyMiddleware(view),
)
print("ok")
