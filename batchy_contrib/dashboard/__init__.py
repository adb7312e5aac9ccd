"""A web dashboard for batchy's job system: queues, jobs, workers, keys, shards and batching.

::

    from batchy_contrib.dashboard import create_app

    app = create_app(queue)                  # an ASGI app (Starlette), to serve or mount
    app = create_app(queue, read_only=True)  # nothing can be changed from it
    app = create_app(queue, auth=check)      # check(request) decides every request

or, alone: ``batchy dashboard app.jobs:queue --port 8000``. Install with
``pip install batchy[dashboard]`` (Starlette, Jinja2, uvicorn).
"""

from .._extras import extra

with extra(__name__, "'batchy[dashboard]'", "starlette", "jinja2"):
    from .app import DashboardError, create_app

__all__ = ["DashboardError", "create_app"]
