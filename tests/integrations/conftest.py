"""Start the integration recipes as real servers on free ports, and query them over HTTP."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "integrations"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    """``serve("strawberry_asgi.py")`` starts a recipe on a free port and returns its URL."""
    servers: list[subprocess.Popen[str]] = []

    def start(script: str, *args: str, env: dict[str, str] | None = None) -> str:
        errors = tempfile.TemporaryFile("w+")
        server = subprocess.Popen(
            [sys.executable, str(EXAMPLES / script), "--port", "0", *args],
            cwd=EXAMPLES,
            stdout=subprocess.PIPE,
            stderr=errors,  # a file, not a pipe: a chatty server must never block on it
            text=True,
            env=env,
        )
        servers.append(server)
        assert server.stdout is not None
        line = server.stdout.readline()  # "listening on http://127.0.0.1:PORT/graphql"
        if not line.startswith("listening on "):
            server.kill()
            server.wait(timeout=10)
            errors.seek(0)
            raise AssertionError(f"{script} did not start: {line!r}\n{errors.read()}")
        return line.split()[-1]

    yield start
    for server in servers:
        server.terminate()
        try:
            server.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()
