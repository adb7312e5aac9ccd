"""The SQL guides' collation example runs and prints what the docs show."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import blog_views

import batchy_contrib

EXAMPLE = Path(blog_views.__file__).with_name("guide_collations.py")

SQLITE = [
    "SQLite one():   {'ADA': 1, 'ada': 1, 'trail': None, 'zed': None}",
    "SQLite query(): {'ADA': None, 'ada': 1, 'trail': None, 'zed': None}",
]
MYSQL = [
    "MySQL  one():   {'ADA': 1, 'ada': 1, 'trail': 2, 'zed': None}",
    "MySQL  query(): {'ADA': None, 'ada': 1, 'trail': None, 'zed': None}",
]
POSTGRES = [
    "PostgreSQL one():   {'ADA': 1, 'ada': 1, 'trail': 2, 'zed': None}",
    "PostgreSQL query(): {'ADA': None, 'ada': 1, 'trail': None, 'zed': None}",
]


def run(*args: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.splitlines()


def test_collation_guide_on_sqlite() -> None:
    assert run() == SQLITE


def test_collation_guide_on_sqlite_and_mariadb(mysql_url: str) -> None:
    assert run(mysql_url) == SQLITE + MYSQL


def test_collation_guide_on_sqlite_and_postgres(postgres_url: str) -> None:
    assert run(postgres_url) == SQLITE + POSTGRES


def test_the_guides_show_the_examples_output() -> None:
    docs = Path(batchy_contrib.__file__).parents[1] / "docs" / "guides"
    guides = (("20-mysql.rst", MYSQL), ("21-sqlite.rst", SQLITE), ("24-postgres.rst", POSTGRES))
    for guide, lines in guides:
        text = (docs / guide).read_text()
        assert "guide_collations.py" in text
        for line in lines:
            assert line in text, (guide, line)
