"""The runnable examples the data-source guides include: they run and print what the docs show."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import blog_views
from contrib_helpers import pg_counter

HERE = Path(blog_views.__file__).parent


def run(script: str, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, str(HERE / script), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_sqlite_guide() -> None:
    assert run("guide_sqlite.py").splitlines() == [
        "{'user': User(id=1, name='ada'), 'titles': ['Again', 'Hello'], 'posts': 2}",
        "{'user': User(id=2, name='bob'), 'titles': ['Hi'], 'posts': 1}",
        "{'user': None, 'titles': [], 'posts': None}",
    ]


def test_mysql_guide(mysql_url: str) -> None:
    assert run("guide_mysql.py", mysql_url).splitlines() == [
        "['hello ada', 'hello bob', 'no user 3']",
        "keys per call: [[1, 2, 3]]",
        "statements the server received: 1",
        "None",
    ]


def test_postgres_guide(postgres_url: str) -> None:
    before = pg_counter().count
    assert run("guide_postgres.py", postgres_url).splitlines() == [
        "['hello ada', 'hello bob', 'no user 3']",
        "keys per call: [[1, 2, 3]]",
        "None",
        "{'id': 2, 'name': 'bob'}",
        "KeyEncodingError two",
    ]
    # What the server received for the loaders: one statement per batch (the three
    # greetings, the name, "2", "two"), each with its keys as one array parameter.
    sent = pg_counter().sent[-(pg_counter().count - before) :]
    loads = [s for s in sent if s.sql.startswith("SELECT k.batchy__pos - 1")]
    assert [s.params for s in loads] == [1, 1, 1, 1]
    assert all("FROM unnest(COALESCE($1, ARRAY(SELECT t0." in s.sql for s in loads)


def test_cache_guide(memcached: tuple[str, int]) -> None:
    lines = run("guide_cache.py", f"{memcached[0]}:{memcached[1]}").splitlines()
    assert lines == [
        "[{'id': 1, 'name': 'ada'}, {'id': 2, 'name': 'bob'}, None]",
        "[{'id': 1, 'name': 'ada'}, {'id': 2, 'name': 'bob'}, None]",
        "users_by_id calls: [[1, 2, 3]]",
        "CacheStats(hits=3, misses=3, skipped=0, errors=0, sets=3, deletes=0)",
        "[{'id': 1, 'name': 'ada lovelace'}, {'id': 2, 'name': 'bob'}, None]",
        "{'id': 2, 'name': 'bob'} CacheStats(hits=0, misses=1, skipped=0, errors=1, sets=0, "
        "deletes=0)",
    ]


def test_cache_keys_guide(memcached: tuple[str, int]) -> None:
    lines = run("guide_cache_keys.py", f"{memcached[0]}:{memcached[1]}").splitlines()
    assert lines == [
        "         7 -> guide:greeting:i7",
        "       '7' -> guide:greeting:s7",
        "       7.0 -> guide:greeting:f7.0",
        "      True -> guide:greeting:b1",
        " (7, 'en') -> guide:greeting:(2|i73|sen)",
        "   'a b:c' -> guide:greeting:sa%20b%3Ac",
        "      None -> guide:greeting:n",
        "   hello 7",
        "   hello '7'",
        "   hello 8",
        "   InvalidKeyError: loader 'cached(greeting)' cannot keep key User(id=1, name='ada') "
        "(User) in memcached: User is not a supported key type. A cached key must be None, "
        "bool, int, float, Decimal, str, bytes, UUID, date, datetime, or tuples of these "
        "(exact types), so that two keys never share an entry; pass key= to "
        "memcache.cached(...) to map keys to one (say key=lambda user: user.id)",
        "guide:by-id:i1",
        "   ada's session",
        "   InvalidKeyError: loader 'sessions' got key 1 (int); its keys are the text of "
        "memcached keys (after prefix 'guide:session:'), so they must be str, or 1 and '1' "
        "would read one entry: call it with str keys, or pass key=str to read 1 as '1'",
        "ada's session",
    ]
