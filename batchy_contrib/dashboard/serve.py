"""Serving the dashboard on its own with uvicorn: what ``batchy dashboard app:queue`` runs.

::

    batchy dashboard app.jobs:queue --port 8000 --read-only
    batchy dashboard app.jobs:queue --auth app.security:operators_only
    batchy dashboard app.jobs:queue --allowed-host jobs.internal   # behind a proxy
"""

from __future__ import annotations

import importlib
import ipaddress
import logging
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from starlette.types import ASGIApp

from .._extras import extra

with extra(__name__, "'batchy[dashboard]'", "uvicorn"):
    import uvicorn

from batchy.jobs import Queue

from ._security import LOCAL_NAMES, HostGuard
from .app import DashboardError, create_app

__all__ = ["load_auth", "serve", "served_app"]

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
    allowed_hosts: Sequence[str] = (),
) -> None:
    """Serve ``queue``'s dashboard until interrupted (Ctrl-C, SIGTERM).

    ``allowed_hosts``: the names (``Host`` headers, without ports) it answers to;
    by default, on a loopback address without ``auth``, only this machine's
    (see :func:`served_app`).
    """
    app = served_app(queue, host, port, read_only=read_only, auth=auth, allowed=allowed_hosts)
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


def served_app(
    queue: Queue,
    host: str,
    port: int,
    *,
    read_only: bool = False,
    auth: Any = None,
    allowed: Sequence[str] = (),
) -> ASGIApp:
    """The app :func:`serve` serves: the dashboard, behind a check of the ``Host`` header
    when ``allowed`` names hosts, or when it listens on a loopback address without
    ``auth``: then only this machine's names reach it, not a page of another site
    whose name was pointed at 127.0.0.1 (DNS rebinding) to read it and act."""
    app: ASGIApp = create_app(queue, read_only=read_only, auth=auth)
    for name in allowed:
        bare = name[2:] if name.startswith("*.") else name
        if name != "*" and not _host_name(bare):
            raise DashboardError(
                f"allowed host {name!r} is not a host name: give one without scheme, port "
                "or path (jobs.example.com, 10.0.0.5, ::1), *.example.com for its "
                "subdomains, or * for any"
            )
    if allowed:
        hint = "add it with --allowed-host (allowed_hosts=) if it is yours"
        return HostGuard(app, list(allowed), hint)
    if auth is None and local(host):
        names = [*LOCAL_NAMES, host] if host not in LOCAL_NAMES else list(LOCAL_NAMES)
        hint = (
            f"open http://{host}:{port}/ on this machine, or, behind a proxy or under "
            "another name, give --allowed-host NAME (allowed_hosts=) and --auth"
        )
        return HostGuard(app, names, hint)
    return app


#: A DNS name or an IPv4 address: dot-separated labels of letters, digits, - and _.
_NAME = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?")


def _host_name(name: str) -> bool:
    if ":" in name:  # only an IPv6 address has colons (a port is not part of a name)
        try:
            return ipaddress.ip_address(name).version == 6
        except ValueError:
            return False
    return _NAME.fullmatch(name) is not None


def local(host: str) -> bool:
    """Whether ``host`` (an address to listen on) is reachable from this machine only."""
    return host in ("localhost", "::1") or host.startswith("127.")


def unguarded(host: str, read_only: bool, auth: Any) -> bool:
    """Whether a dashboard on ``host`` takes actions from anyone beyond this machine."""
    return not (local(host) or read_only or auth is not None)
