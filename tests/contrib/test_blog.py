"""The blog example on real servers: queries the database received per render, cache paths, writes."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import blog_seed
import blog_views
import pytest
from contrib_helpers import statements

from batchy.testing import record
from batchy_contrib.cache import memcache

POSTS, COMMENTS = 5, 3
POST_IDS = list(range(1, POSTS + 1))


@pytest.fixture
async def seeded(db: Any) -> Any:
    await blog_seed.seed(db, users=10, posts=POSTS, comments=COMMENTS)
    return db


async def counted(db: Any, render: Any) -> tuple[Any, int, Any]:
    """(page, statements the database received, recorder) of one render."""
    before = await statements(db)
    with record() as rec:
        page = await render()
    return page, await statements(db) - before, rec


async def test_naive_costs_2_plus_2n_queries_per_post(seeded: Any) -> None:
    page, queries, _ = await counted(seeded, lambda: blog_views.render_naive(seeded, POST_IDS))
    assert queries == POSTS * (2 + 2 * COMMENTS)
    assert [len(p["comments"]) for p in page] == [COMMENTS] * POSTS


async def test_batchy_costs_one_query_per_loader_per_round(seeded: Any) -> None:
    naive = await blog_views.render_naive(seeded, POST_IDS)
    blog = blog_views.loaders(seeded)
    page, queries, rec = await counted(seeded, lambda: blog_views.render_batchy(blog, POST_IDS))
    assert page == naive
    assert queries == 4
    assert rec.rounds == 3
    assert rec.calls(blog.posts_by_id) == [POST_IDS]
    assert rec.calls(blog.comment_ids_by_post) == [POST_IDS]
    assert rec.calls(blog.comments_by_id) == [list(range(1, POSTS * COMMENTS + 1))]
    (users_call,) = rec.calls(blog.users_by_id)
    assert sorted(users_call) == sorted({c["user_id"] for p in naive for c in p["comments"]})


async def test_memcached_in_front_cold_then_warm(seeded: Any, memcached: Any) -> None:
    client = memcache.connect(f"{memcached[0]}:{memcached[1]}")
    blog = blog_views.loaders(seeded)
    fronted = blog_views.cached(blog, client, namespace=f"t{uuid.uuid4().hex[:8]}")
    naive = await blog_views.render_naive(seeded, POST_IDS)

    page, queries, rec = await counted(seeded, lambda: blog_views.render_batchy(fronted, POST_IDS))
    assert page == naive and queries == 4
    assert rec.calls(blog.posts_by_id) == [POST_IDS]  # the misses, once per loader
    assert rec.calls(blog.comments_by_id) == [list(range(1, POSTS * COMMENTS + 1))]
    assert sum(loader.stats.hits for loader in fronted.all()) == 0

    page, queries, rec = await counted(seeded, lambda: blog_views.render_batchy(fronted, POST_IDS))
    assert page == naive and queries == 0
    assert rec.rounds == 3
    for loader in blog.all():
        assert rec.calls(loader) == []
    assert sum(loader.stats.misses for loader in fronted.all()) == sum(
        loader.stats.hits for loader in fronted.all()
    )


async def test_a_new_comment_invalidates_its_post(seeded: Any, memcached: Any) -> None:
    client = memcache.connect(f"{memcached[0]}:{memcached[1]}")
    blog = blog_views.loaders(seeded)
    fronted = blog_views.cached(blog, client, namespace=f"t{uuid.uuid4().hex[:8]}")
    await blog_views.render_batchy(fronted, POST_IDS)  # warm

    cid = await blog_views.add_comment(seeded, fronted, 2, 1, "first!")
    page, queries, rec = await counted(seeded, lambda: blog_views.render_batchy(fronted, POST_IDS))
    assert page == await blog_views.render_naive(seeded, POST_IDS)
    assert page[1]["comments"][-1]["body"] == "first!"
    assert rec.calls(blog.comment_ids_by_post) == [[2]]
    assert rec.calls(blog.comments_by_id) == [[cid]]
    assert rec.calls(blog.posts_by_id) == []
    assert queries == 2 + len(rec.calls(blog.users_by_id))  # user 1 may be cached already


async def test_memcached_down_still_renders_the_page(seeded: Any) -> None:
    from contrib_helpers import closed_port

    down = memcache.connect(f"127.0.0.1:{closed_port()}")
    blog = blog_views.loaders(seeded)
    fronted = blog_views.cached(blog, down)
    page, queries, _ = await counted(seeded, lambda: blog_views.render_batchy(fronted, POST_IDS))
    assert page == await blog_views.render_naive(seeded, POST_IDS)
    assert queries == 4
    assert sum(loader.stats.errors for loader in fronted.all()) >= 1


def test_the_demo_runs_on_sqlite(tmp_path: Path) -> None:
    script = Path(blog_views.__file__).with_name("render.py")
    out = subprocess.run(
        [sys.executable, str(script), "--sqlite", str(tmp_path / "demo.db"), "--posts", "10"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = {line.split()[0]: line.split() for line in out.stdout.splitlines() if line}
    assert lines["naive"][1] == str(10 * (2 + 2 * 20))
    assert lines["batchy"][1:3] == ["4", "3"]
    assert "queries = SQLite's trace callback" in out.stdout


def test_the_demo_runs_on_postgres(postgres_server: Any, _postgres_database: str) -> None:
    script = Path(blog_views.__file__).with_name("render.py")
    url = f"postgresql://postgres@{postgres_server[0]}:{postgres_server[1]}/{_postgres_database}"
    out = subprocess.run(
        [sys.executable, str(script), "--postgres", url, "--posts", "10", "--seed"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = {line.split()[0]: line.split() for line in out.stdout.splitlines() if line}
    assert lines["naive"][1] == str(10 * (2 + 2 * 20))
    assert lines["batchy"][1:3] == ["4", "3"]
    assert "queries = statements received, on the wire" in out.stdout


def test_the_seed_script_takes_sizes(tmp_path: Path) -> None:
    script = Path(blog_views.__file__).with_name("blog_seed.py")
    path = tmp_path / "seed.db"
    subprocess.run(
        [
            sys.executable,
            str(script),
            "--sqlite",
            str(path),
            "--users",
            "3",
            "--posts",
            "4",
            "--comments",
            "2",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    import sqlite3

    with sqlite3.connect(path) as conn:
        counts = [conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in blog_seed.TABLES]
    assert counts == [8, 4, 3]


async def test_render_inside_batchy_run_from_sync_code(tmp_path: Path) -> None:
    """Sync entry point: batchy.run works with the SQLite loaders (threads, no server)."""
    here, path = str(Path(blog_views.__file__).parent), str(tmp_path / "run.db")
    code = (
        f"import asyncio, sys; sys.path.insert(0, {here!r})\n"
        "import batchy, blog_seed, blog_views\n"
        "from batchy_contrib.sql import sqlite\n"
        f"db = sqlite.Database({path!r})\n"
        "asyncio.run(blog_seed.seed(db, posts=3, comments=2))\n"
        "blog = blog_views.loaders(db)\n"
        "page = batchy.run(batchy.gather(*(blog_views.post_view(blog, p) for p in (1, 2, 3))))\n"
        "print(len(page), sum(len(p['comments']) for p in page))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["3", "6"]
