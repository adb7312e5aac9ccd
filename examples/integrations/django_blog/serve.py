"""Serve the Django blog: create and fill the tables, then WSGI (wsgiref) or ASGI (uvicorn).

Run it: ``python examples/integrations/django_blog/serve.py --port 8000 [--db postgres] [--asgi]``
(needs ``pip install batchy[django]``, plus graphene-django for ``/graphql``,
which needs graphql-core 3.2), then::

    curl -s 'localhost:8000/feed?first=3'
    curl -s localhost:8000/graphql -H 'content-type: application/json' \\
         -d '{"query": "{ feed(first: 3) { title author { name } } }"}'
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "blogsite.settings")


def setup_database() -> None:
    from django.core.management import call_command
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("DROP SCHEMA IF EXISTS batchy_django_recipe CASCADE")
            cursor.execute("CREATE SCHEMA batchy_django_recipe")
    call_command("migrate", run_syncdb=True, verbosity=0)
    from blog.models import Author, Comment, Post

    Comment.objects.all().delete()
    Post.objects.all().delete()
    Author.objects.all().delete()
    Author.objects.bulk_create(Author(id=i, name=f"user {i}") for i in range(1, 13))
    Post.objects.bulk_create(
        Post(id=p, title=f"post {p}", author_id=(p - 1) % 4 + 1) for p in range(1, 11)
    )
    Comment.objects.bulk_create(
        Comment(id=c, post_id=(c - 1) // 3 + 1, body=f"comment {c}", author_id=(c - 1) % 12 + 1)
        for c in range(1, 31)
    )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--asgi", action="store_true", help="serve with uvicorn (async views)")
    args = parser.parse_args(argv)
    os.environ["BLOG_DB"] = args.db
    import django

    django.setup()
    setup_database()
    if args.asgi:
        import uvicorn
        from django.core.asgi import get_asgi_application

        sock = socket.create_server((args.host, args.port))
        print(f"listening on http://{args.host}:{sock.getsockname()[1]}/graphql", flush=True)
        config = uvicorn.Config(get_asgi_application(), log_level="warning")
        uvicorn.Server(config).run(sockets=[sock])
    else:
        from wsgiref.simple_server import WSGIRequestHandler, make_server

        from django.core.wsgi import get_wsgi_application

        class Quiet(WSGIRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

        with make_server(
            args.host, args.port, get_wsgi_application(), handler_class=Quiet
        ) as server:
            print(f"listening on http://{args.host}:{server.server_port}/graphql", flush=True)
            server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
