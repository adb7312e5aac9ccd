"""A GraphQL server over HTTP on the blog store: WSGI, sync execution, batched, stdlib only.

Run it: ``python examples/graphql/http_server.py [--port 8000]``, then POST a query::

    curl -s localhost:8000/graphql -H 'content-type: application/json' \\
         -d '{"query": "{ feed(first: 3) { title author { name } } }"}'

Each request runs ``batchy_contrib.graphql.graphql_sync`` — the way a Flask or
Django view would — in a scope of its own, and the response's ``extensions``
say how many rounds and batch calls it took. (The stats use
``batchy.testing.record``, which sees every request of the process: fine for
this single-threaded demo server, not for a threaded one.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import graphql as gql
from blog_data import SDL, comments_by_post, feed_posts, users_by_id

from batchy.testing import record
from batchy_contrib.graphql import graphql_sync


def make_schema() -> gql.GraphQLSchema:
    schema = gql.build_schema(SDL)
    query = schema.query_type
    post = schema.get_type("Post")
    comment = schema.get_type("Comment")
    assert query is not None
    assert isinstance(post, gql.GraphQLObjectType)
    assert isinstance(comment, gql.GraphQLObjectType)
    query.fields["viewer"].resolve = lambda root, info: users_by_id(1)
    query.fields["feed"].resolve = lambda root, info, first: feed_posts(first)
    post.fields["author"].resolve = lambda obj, info: users_by_id(obj["author_id"])
    post.fields["comments"].resolve = lambda obj, info: comments_by_post(obj["id"])
    comment.fields["author"].resolve = lambda obj, info: users_by_id(obj["author_id"])
    return schema


SCHEMA = make_schema()

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    """The WSGI application: POST /graphql with a JSON body {query, variables, operationName}."""
    if environ["PATH_INFO"] != "/graphql" or environ["REQUEST_METHOD"] != "POST":
        return reply(start_response, "404 Not Found", {"errors": [{"message": "POST /graphql"}]})
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = json.loads(environ["wsgi.input"].read(length) or b"{}")
        query = body["query"]
    except (ValueError, KeyError, TypeError):
        message = 'the body must be JSON like {"query": "{ viewer { name } }"}'
        return reply(start_response, "400 Bad Request", {"errors": [{"message": message}]})
    with record() as rec:
        result = graphql_sync(
            SCHEMA,
            query,
            variable_values=body.get("variables"),
            operation_name=body.get("operationName"),
        )
    payload: dict[str, Any] = dict(result.formatted)
    payload["extensions"] = {"batchy": {"rounds": rec.rounds, "calls": rec.call_counts()}}
    return reply(start_response, "200 OK", payload)


def reply(start_response: StartResponse, status: str, payload: dict[str, Any]) -> list[bytes]:
    data = json.dumps(payload).encode()
    start_response(
        status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
    )
    return [data]


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    args = parser.parse_args(argv)
    with make_server(args.host, args.port, app, handler_class=QuietHandler) as server:
        # The first line says where we listen (tests read the port from it).
        print(f"listening on http://{args.host}:{server.server_port}/graphql", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
