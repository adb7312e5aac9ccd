"""The blog's tables: authors, posts, comments."""

from __future__ import annotations

from django.db import models


class Author(models.Model):
    name = models.CharField(max_length=100)

    class Meta:
        app_label = "blog"


class Post(models.Model):
    title = models.CharField(max_length=200)
    author = models.ForeignKey(Author, on_delete=models.CASCADE, related_name="posts")

    class Meta:
        app_label = "blog"
        ordering = ("id",)


class Comment(models.Model):
    post = models.ForeignKey(Post, on_delete=models.CASCADE, related_name="comments")
    body = models.TextField()
    author = models.ForeignKey(Author, on_delete=models.CASCADE, related_name="comments")

    class Meta:
        app_label = "blog"
        ordering = ("id",)
