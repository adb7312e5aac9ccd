"""Fixtures of the dashboard tests: the job tests' ``backend`` (memory, SQLite, Redis, PostgreSQL),
a seeded board of jobs on it, and an HTTP client of its dashboard app.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # board_app, also imported by the servers the tests start
    sys.path.insert(0, str(HERE))

# The same stores as the job tests, set up and cleaned up the same way.
from board_app import Board, Seeded, seed  # noqa: E402
from dash_helpers import SECRET  # noqa: E402
from jobs.conftest import backend, postgres_dsn, postgres_schema  # noqa: E402, F401

from batchy.jobs import Backend, Queue  # noqa: E402
from batchy_contrib.dashboard import create_app  # noqa: E402


@pytest.fixture
def board(backend: Backend) -> Board:  # noqa: F811 - the imported fixture
    return Board(Queue(backend))


@pytest.fixture
async def seeded(board: Board) -> Seeded:
    return await seed(board)


@pytest.fixture
async def client(board: Board) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(board.queue, secret_key=SECRET)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://dash") as c:
        yield c
