"""The tutorial's test (docs/tutorial.rst, "Step 5") as the page includes it, on examples/blog.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

import batchy
from batchy.testing import record


def _load_blog() -> Any:
    # By path, under a name of its own: the Django recipe's app is a package called blog.
    path = Path(__file__).parents[1] / "examples" / "blog.py"
    spec = importlib.util.spec_from_file_location("tutorial_blog", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


blog = _load_blog()  # what `import blog` gives a test next to examples/blog.py


# [tutorial-test-start]
@pytest.fixture(autouse=True)
def store() -> None:
    # What blog.main() does before it renders: the tables the loaders query.
    blog.db = blog.Store(posts=50, comments=20, users=200, latency_ms=0)


def test_post_page_is_batched() -> None:
    with record() as rec:
        batchy.run(batchy.gather(*(blog.post_view(p) for p in range(1, 51))))
    rec.assert_max(
        rounds=3,
        calls={
            blog.posts_by_id: 1,
            blog.comment_ids_by_post: 1,
            blog.comments_by_id: 1,
            blog.users_by_id: 1,
        },
    )


# [tutorial-test-end]


@batchy.task
def sequential_post_view(pid: int) -> Any:
    post = yield blog.posts_by_id(pid)
    cids = yield blog.comment_ids_by_post(pid)
    comments = yield [blog.comment_view(c) for c in cids]
    return {**post, "comments": comments}


def test_the_sequential_handler_fails_as_the_tutorial_shows() -> None:
    with record() as rec:
        batchy.run(batchy.gather(*(sequential_post_view(p) for p in range(1, 51))))
    with pytest.raises(AssertionError) as info:
        rec.assert_max(rounds=3)
    assert str(info.value) == (
        "batching regressed: 4 rounds, expected at most 3\n"
        "  round 1: posts_by_id(50 keys)\n"
        "  round 2: comment_ids_by_post(50 keys)\n"
        "  round 3: comments_by_id(1000 keys)\n"
        "  round 4: users_by_id(200 keys)"
    )
