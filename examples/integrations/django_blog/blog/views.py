"""The feed as JSON, from a sync view and from an async view: the same handler, batched."""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse

from batchy_contrib.web.django import run

from .loaders import feed_view


def feed(request: Any) -> JsonResponse:  # sync: batchy_contrib.web.django.run, no event loop here
    posts = run(feed_view(int(request.GET.get("first", 10))))
    return JsonResponse({"feed": posts, "batchy": request.batchy.as_dict()})


async def feed_async(request: Any) -> JsonResponse:  # async (ASGI): await the handler
    posts = await feed_view(int(request.GET.get("first", 10)))
    return JsonResponse({"feed": posts, "batchy": request.batchy.as_dict()})
