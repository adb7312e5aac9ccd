"""URLs: the feed as JSON (sync and async views), and GraphQL when graphene-django is installed."""

from __future__ import annotations

from blog import views
from django.conf import settings
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

urlpatterns = [
    path("feed", views.feed),
    path("feed-async", views.feed_async),
]

if settings.HAS_GRAPHENE:
    from blog.graphql_view import BatchedGraphQLView
    from blog.schema import schema

    urlpatterns.append(path("graphql", csrf_exempt(BatchedGraphQLView.as_view(schema=schema))))
