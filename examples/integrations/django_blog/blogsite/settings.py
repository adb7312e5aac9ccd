"""Settings: the blog app, batchy's middleware, SQLite or PostgreSQL (``BLOG_DB``)."""

from __future__ import annotations

import importlib.util
import os
import tempfile

SECRET_KEY = "recipe-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "blogsite.urls"
INSTALLED_APPS = ["blog"]
USE_TZ = True
MIDDLEWARE = [
    "blog.sqlcount.CountSelects",
    "batchy_contrib.web.django.BatchyMiddleware",  # one batchy scope per request
]
BATCHY = {"LOG": True, "HEADER": "X-Batchy"}
HAS_GRAPHENE = importlib.util.find_spec("graphene_django") is not None
if HAS_GRAPHENE:
    INSTALLED_APPS.append("graphene_django")

if os.environ.get("BLOG_DB") == "postgres":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "test",
            "HOST": "127.0.0.1",
            "PORT": "5432",
            "USER": os.environ.get("PGUSER", "postgres"),
            # A schema of its own, so the recipe never touches other tables of `test`.
            "OPTIONS": {"options": "-c search_path=batchy_django_recipe"},
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("BLOG_SQLITE", os.path.join(tempfile.gettempdir(), "blog.db")),
        }
    }
LOGGING = {
    "version": 1,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"batchy.requests": {"handlers": ["console"], "level": "INFO"}},
}
