"""The blog's GraphQL schema in graphene-django: resolvers return batchy loader futures."""

from __future__ import annotations

from typing import Any

import graphene
from graphene_django import DjangoObjectType

from .loaders import authors_by_id, comments_by_post, posts_by_id
from .models import Author, Comment, Post


class AuthorType(DjangoObjectType):
    class Meta:
        model = Author
        fields = ("id", "name")


class CommentType(DjangoObjectType):
    class Meta:
        model = Comment
        fields = ("id", "body", "author")

    def resolve_author(self, info: Any) -> Any:
        return authors_by_id(self.author_id)  # a loader future: batched across the query


class PostType(DjangoObjectType):
    comments = graphene.List(graphene.NonNull(CommentType), required=True)

    class Meta:
        model = Post
        fields = ("id", "title", "author", "comments")

    def resolve_author(self, info: Any) -> Any:
        return authors_by_id(self.author_id)

    def resolve_comments(self, info: Any) -> Any:
        return comments_by_post(self.id)


class Query(graphene.ObjectType):
    viewer = graphene.Field(AuthorType, required=True)
    feed = graphene.List(
        graphene.NonNull(PostType), required=True, first=graphene.Int(default_value=10)
    )

    def resolve_viewer(self, info: Any) -> Any:
        return authors_by_id(1)

    def resolve_feed(self, info: Any, first: int) -> Any:
        return [posts_by_id(pid) for pid in range(1, first + 1)]


schema = graphene.Schema(query=Query)
