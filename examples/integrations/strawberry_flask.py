"""Strawberry in a sync Flask app, batched: generator resolvers, strawberry's Flask view, Werkzeug.

Run it: ``python examples/integrations/strawberry_flask.py --port 8000`` (needs
``pip install batchy[flask,graphql] strawberry-graphql``), then::

    curl -s localhost:8000/graphql -H 'content-type: application/json' \\
         -d '{"query": "{ feed(first: 3) { title author { name } } }"}'

Flask views are sync: there is no event loop here, and none is needed in your
code. Strawberry's sync execution on batchy's class runs one for the request.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Generator, Iterator
from typing import Any

import blog_db
import strawberry
from blog_db import comments_by_post, feed_posts, users_by_id
from flask import Flask
from strawberry.extensions import SchemaExtension
from strawberry.flask.views import GraphQLView
from werkzeug.serving import make_server

from batchy_contrib.graphql.strawberry import BatchyExtension, execution_context_class
from batchy_contrib.web.flask import Batchy

# Generator resolvers: yield what they wait for, one key at a time; batchy runs
# them as handlers, so the keys of one level meet in one batch.
Wait = Generator[Any, Any, Any]


@strawberry.type
class User:
    id: strawberry.ID
    name: str


def user(row: dict[str, Any]) -> User:
    return User(id=strawberry.ID(str(row["id"])), name=row["name"])


@strawberry.type
class Comment:
    id: strawberry.ID
    body: str
    author_id: strawberry.Private[int]

    @strawberry.field(graphql_type=User)
    def author(self) -> Wait:
        return user((yield users_by_id(self.author_id)))


@strawberry.type
class Post:
    id: strawberry.ID
    title: str
    author_id: strawberry.Private[int]

    @strawberry.field(graphql_type=User)
    def author(self) -> Wait:
        return user((yield users_by_id(self.author_id)))

    @strawberry.field(graphql_type=list[Comment])
    def comments(self) -> Wait:
        rows = yield comments_by_post(int(self.id))
        return [
            Comment(id=strawberry.ID(str(r["id"])), body=r["body"], author_id=r["author_id"])
            for r in rows
        ]


@strawberry.type
class Query:
    @strawberry.field(graphql_type=User)
    def viewer(self) -> Wait:
        return user((yield users_by_id(1)))

    @strawberry.field(graphql_type=list[Post])
    def feed(self, first: int = 10) -> Wait:
        rows = yield feed_posts(first)
        return [
            Post(id=strawberry.ID(str(r["id"])), title=r["title"], author_id=r["author_id"])
            for r in rows
        ]


class SQLCount(SchemaExtension):
    """Adds ``extensions["sql"]``: the SELECTs the database ran during this operation."""

    def on_operation(self) -> Iterator[None]:
        self.before = blog_db.SELECTS
        yield

    def get_results(self) -> dict[str, Any]:
        return {"sql": blog_db.SELECTS - self.before}


schema = strawberry.Schema(
    query=Query,
    execution_context_class=execution_context_class,  # sync execution batches, no loop needed
    extensions=[BatchyExtension, SQLCount],  # batching stats in the response's extensions
)

app = Flask(__name__)
app.config["BATCHY_LOG"] = True
Batchy(app)  # one batchy scope per request
app.add_url_rule("/graphql", view_func=GraphQLView.as_view("graphql", schema=schema))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    server = make_server(args.host, args.port, app, threaded=True)
    # The first line says where we listen (the tests read the port from it).
    print(f"listening on http://{args.host}:{server.server_port}/graphql", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
