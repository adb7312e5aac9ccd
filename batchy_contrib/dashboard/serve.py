"""Serving the dashboard on its own with uvicorn: what ``batchy dashboard app:queue`` runs.

::

    batchy dashboard app.jobs:queue --port 8000 --read-only
    batchy dashboard app.jobs:queue --auth app.security:operators_only
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

from .._extras import extra

with extra(__name__, "'batchy[dashboard]'", "uvicorn"):
    import uvicorn

from batchy.jobs import Queue

from .app import DashboardError, create_app

__all__ = ["load_auth", "serve"]

log = logging.getLogger("batchy.dashboard")


def load_auth(spec: str) -> Any:
    """The callable ``module:attribute`` names (the current directory is importable)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise DashboardError(
            f"--auth {spec!r} is not 'module:callable'; e.g. --auth app.security:operators_only"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise DashboardError(
            f"--auth {spec!r}: cannot import module {module_name!r} ({error}); run from the "
            "directory that contains it, or fix PYTHONPATH"
        ) from error
    found = getattr(module, attr, None)
    if not callable(found):
        raise DashboardError(
            f"--auth {spec!r}: {module_name}.{attr} is {found!r}, not a callable; point at a "
            "function taking the request and returning whether it may proceed"
        )
    return found


async def serve(
    queue: Queue,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    read_only: bool = False,
    auth: Any = None,
    root_path: str = "",
    log_level: str = "info",
) -> None:
    """Serve ``queue``'s dashboard until interrupted (Ctrl-C, SIGTERM)."""
    app = create_app(queue, read_only=read_only, auth=auth)
    if unguarded(host, read_only, auth):
        print(
            f"warning: the dashboard listens on {host}, beyond this machine, with no --auth: "
            "anyone who can reach the port can delete, retry and cancel jobs; give --auth "
            "(or --read-only), or serve it behind a proxy that checks who asks",
            file=sys.stderr,
            flush=True,
        )
    config = uvicorn.Config(
        app, host=host, port=port, root_path=root_path, log_level=log_level, lifespan="off"
    )
    mode = " (read-only)" if read_only else ""
    print(
        f"batchy dashboard{mode} for {queue.admin.store}: http://{host}:{port}{root_path}/",
        flush=True,
    )
    await uvicorn.Server(config).serve()


def unguarded(host: str, read_only: bool, auth: Any) -> bool:
    """Whether a dashboard on ``host`` takes actions from anyone beyond this machine."""
    local = host in ("localhost", "::1") or host.startswith("127.")
    return not (local or read_only or auth is not None)
