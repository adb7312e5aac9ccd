"""The GraphQL feed over HTTP: strawberry servers on uvicorn, and the client that times them.

``python -m benchmarks._graphql_http batchy|dataloader --posts N --comments M``
serves the feed with strawberry's ASGI app on uvicorn (its defaults: uvloop and
h11 here) on a free port and prints ``listening on URL`` first. Both servers run
the same strawberry types and ``async def`` resolvers, the way each is
documented; only the loading differs:

- **batchy**: resolvers ``await`` module-level ``@batchy.batched`` loaders; the
  schema has batchy's execution context class and ``BatchyExtension`` (the
  request's rounds and calls in ``extensions``), the app is wrapped in
  ``BatchyMiddleware`` (one scope per request).
- **dataloader**: per-request ``strawberry.dataloader.DataLoader`` instances
  made in ``get_context``, resolvers ``await info.context[...].load(key)``.

:func:`requests_per_second` is the client: ``clients`` connections, each
posting the query again as soon as its response is in, for ``seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import strawberry

ROOT = Path(__file__).resolve().parents[1]

# --- the client (the benchmark process) ---------------------------------------------


@contextmanager
def server(system: str, posts: int, comments: int, users: int, loop: str = "auto") -> Iterator[str]:
    """Start one server process on a free port; yield its URL; stop it."""
    with tempfile.TemporaryFile("w+") as errors:
        args = ["--posts", str(posts), "--comments", str(comments), "--users", str(users)]
        args += ["--loop", loop]
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks._graphql_http", system, *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=errors,  # a file, not a pipe: a chatty server must never block on it
            text=True,
        )
        try:
            line = proc.stdout.readline() if proc.stdout else ""
            if not line.startswith("listening on "):
                proc.kill()
                proc.wait(10)
                errors.seek(0)
                raise RuntimeError(f"{system} server did not start: {line!r}\n{errors.read()}")
            yield line.split()[-1]
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def fetch_once(url: str, query: str) -> dict[str, Any]:
    """One request, its JSON decoded: to check what a server answers."""
    import httpx

    response = httpx.post(url, json={"query": query}, timeout=60)
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    if body.get("errors"):
        raise RuntimeError(f"{url} answered with errors: {body['errors'][:1]}")
    return body


def requests_per_second(url: str, query: str, *, clients: int, seconds: float) -> float:
    """Requests completed per second by ``clients`` concurrent clients over ``seconds``."""
    import httpx

    payload = json.dumps({"query": query}).encode()
    headers = {"content-type": "application/json"}

    async def main() -> float:
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(limits=limits, timeout=60) as http:
            done = 0
            stop = time.perf_counter() + seconds

            async def client() -> None:
                nonlocal done
                while time.perf_counter() < stop:
                    response = await http.post(url, content=payload, headers=headers)
                    if response.status_code != 200:
                        raise RuntimeError(f"{url}: HTTP {response.status_code}")
                    done += 1

            start = time.perf_counter()
            await asyncio.gather(*(client() for _ in range(clients)))
            # Requests in flight at the deadline finish after it: divide by the
            # time it took them all to finish, not by ``seconds``.
            return done / (time.perf_counter() - start)

    return asyncio.run(main())


# --- the servers (a process each) ----------------------------------------------------


@strawberry.type
class User:
    id: strawberry.ID
    name: str


@strawberry.type
class Comment:
    id: strawberry.ID
    body: str
    author_id: strawberry.Private[int]

    @strawberry.field
    async def author(self, info: strawberry.Info) -> User:
        return await load(info, "users", self.author_id)  # type: ignore[no-any-return]


@strawberry.type
class Post:
    id: strawberry.ID
    title: str
    author_id: strawberry.Private[int]

    @strawberry.field
    async def author(self, info: strawberry.Info) -> User:
        return await load(info, "users", self.author_id)  # type: ignore[no-any-return]

    @strawberry.field
    async def comments(self, info: strawberry.Info) -> list[Comment]:
        return await load(info, "comments", int(self.id))  # type: ignore[no-any-return]


@strawberry.type
class Query:
    @strawberry.field
    async def viewer(self, info: strawberry.Info) -> User:
        return await load(info, "users", 1)  # type: ignore[no-any-return]

    @strawberry.field
    async def feed(self, info: strawberry.Info, first: int = 10) -> list[Post]:
        return await load(info, "feed", first)  # type: ignore[no-any-return]


def load(info: Any, name: str, key: Any) -> Awaitable[Any]:
    """What every resolver awaits: the server's loader ``name`` for ``key`` (set at start)."""
    raise RuntimeError("build_app() sets the loading of this server")


def build_app(system: str, posts: int, comments: int, users: int) -> Any:
    global load
    from strawberry.asgi import GraphQL
    from strawberry.dataloader import DataLoader

    from ._graphql_data import Feed

    feed = Feed(posts, comments, users)

    # The rows as strawberry objects, made once: the resolvers do nothing but load.
    user_objects = {
        i: User(id=strawberry.ID(str(i)), name=u["name"]) for i, u in feed.users.items()
    }
    post_objects = [
        Post(id=strawberry.ID(str(p["id"])), title=p["title"], author_id=p["author_id"])
        for p in feed.post_rows
    ]
    comment_objects = {
        p: [
            Comment(id=strawberry.ID(str(c["id"])), body=c["body"], author_id=c["author_id"])
            for c in rows
        ]
        for p, rows in feed.comments.items()
    }

    async def users_by_id(ids: list[int]) -> list[Any]:
        return [user_objects.get(i) for i in ids]

    async def feed_posts(firsts: list[int]) -> list[Any]:
        return [post_objects[:n] for n in firsts]

    async def comments_by_post(post_ids: list[int]) -> list[Any]:
        return [comment_objects.get(p, []) for p in post_ids]

    batch_functions = {"users": users_by_id, "feed": feed_posts, "comments": comments_by_post}

    if system == "batchy":
        import batchy
        from batchy_contrib.graphql.strawberry import BatchyExtension, execution_context_class
        from batchy_contrib.web.asgi import BatchyMiddleware

        batched = {name: batchy.batched(fn) for name, fn in batch_functions.items()}

        def load_batchy(info: Any, name: str, key: Any) -> Any:
            return batched[name](key)

        load = load_batchy
        schema = strawberry.Schema(
            query=Query,
            execution_context_class=execution_context_class,
            extensions=[BatchyExtension],
        )
        return BatchyMiddleware(GraphQL(schema))

    def load_dataloader(info: Any, name: str, key: Any) -> Any:
        return info.context[name].load(key)

    load = load_dataloader

    class PerRequestLoaders(GraphQL):  # type: ignore[type-arg]
        async def get_context(self, request: Any, response: Any) -> Any:
            return {name: DataLoader(load_fn=fn) for name, fn in batch_functions.items()}

    return PerRequestLoaders(strawberry.Schema(query=Query))


def main(argv: list[str]) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("system", choices=["batchy", "dataloader"])
    parser.add_argument("--posts", type=int, default=2000)
    parser.add_argument("--comments", type=int, default=3)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--loop", default="auto", help="uvicorn's --loop: auto, asyncio, uvloop")
    args = parser.parse_args(argv)
    app = build_app(args.system, args.posts, args.comments, args.users)
    sock = socket.create_server(("127.0.0.1", 0))
    print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}/graphql", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, loop=args.loop)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main(sys.argv[1:])
