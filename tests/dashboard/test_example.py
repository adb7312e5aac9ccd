"""The Operations guide's example: the dashboard mounted behind HTTP Basic auth, and read-only."""

from __future__ import annotations

import base64
import importlib.util
import re
from pathlib import Path

import httpx
import pytest
from board_app import Board, seed
from dash_helpers import csrf_of

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dashboard_app.py"


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"authorization": f"Basic {token}"}


@pytest.fixture
def example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("JOBS_DB", str(tmp_path / "jobs.db"))
    monkeypatch.setenv("BATCHY_DASHBOARD_SECRET", "the example's secret, 32 bytes.")
    spec = importlib.util.spec_from_file_location("dashboard_app", EXAMPLE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_operators_act_viewers_look_strangers_sign_in(example) -> None:
    board = Board(example.queue)
    seeded = await seed(board)
    transport = httpx.ASGITransport(app=example.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as c:
        page = await c.get("/admin/jobs/")
        assert page.status_code == 401 and page.headers["www-authenticate"].startswith("Basic")
        page = await c.get("/admin/jobs/", headers=basic("bob", "wrong"))
        assert page.status_code == 401
        page = await c.get("/admin/jobs/", headers=basic("bob", "bücher"))  # non-ASCII
        assert page.status_code == 401

        # A viewer sees everything, but the hook refuses the POST before anything runs.
        page = await c.get("/admin/jobs/dead", headers=basic("bob", "builder"))
        assert page.status_code == 200 and seeded.dead[0] in page.text
        form = {"csrf": csrf_of(page.text), "id": seeded.dead[0]}
        refused = await c.post(
            "/admin/jobs/actions/retry_dead", data=form, headers=basic("bob", "builder")
        )
        assert refused.status_code == 403
        assert (await example.queue.admin.job(seeded.dead[0])).state == "dead"

        # An operator retries it.
        page = await c.get("/admin/jobs/dead", headers=basic("ada", "lovelace"))
        form = {"csrf": csrf_of(page.text), "id": seeded.dead[0], "next": "/admin/jobs/dead"}
        done = await c.post(
            "/admin/jobs/actions/retry_dead", data=form, headers=basic("ada", "lovelace")
        )
        assert done.status_code == 303
        assert done.headers["location"] == "/admin/jobs/dead?notice=retry_dead&n=1"
        assert (await example.queue.admin.job(seeded.dead[0])).state == "queued"

        # The status dashboard is read-only, even for operators.
        page = await c.get("/status/jobs/dead", headers=basic("ada", "lovelace"))
        assert page.status_code == 200 and 'method="post"' not in page.text
        assert re.search(r'class="badge ro">read-only<', page.text)
        refused = await c.post(
            "/status/jobs/actions/delete_dead",
            data={"csrf": form["csrf"], "all": "1"},
            headers=basic("ada", "lovelace"),
        )
        assert refused.status_code == 403
        assert (await example.queue.admin.info()).dead == 2
    await example.queue.close()
