"""ORM loaders over the blog's models, and the feed as a batchy handler."""

from __future__ import annotations

from typing import Any

import batchy
from batchy_contrib.web.django import fk_loader, model_loader

from .models import Author, Comment, Post

authors_by_id = model_loader(Author)  # Author.objects.in_bulk(ids): one query per batch
posts_by_id = model_loader(Post)
comments_by_post = fk_loader(Comment, "post")  # Comment.objects.filter(post_id__in=ids)


@batchy.task
def post_view(post_id: int) -> Any:
    post = yield posts_by_id(post_id)
    author, comments = yield [authors_by_id(post.author_id), comments_by_post(post.id)]
    commenters = yield [authors_by_id(c.author_id) for c in comments]
    return {
        "id": post.id,
        "title": post.title,
        "author": author.name,
        "comments": [
            {"body": c.body, "author": who.name}
            for c, who in zip(comments, commenters, strict=True)
        ],
    }


@batchy.task
def feed_view(first: int) -> Any:
    return (yield [post_view(pid) for pid in range(1, first + 1)])
