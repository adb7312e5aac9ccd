"""The SQLite guide's sync example (docs/guides/21-sqlite.rst): module-level loaders in sync code.

python examples/blog/guide_sync_sqlite.py [path/to/app.db]
"""

import os
import shutil
import sys
import tempfile

import batchy
from batchy.testing import record
from batchy_contrib.sql import sqlite

TMP = tempfile.mkdtemp()
PATH = sys.argv[1] if len(sys.argv) > 1 else os.path.join(TMP, "app.db")

# -- app/data.py: declared at import time, in sync code -------------------------------

db = sqlite.Database(PATH)  # its worker threads serve whichever event loop calls
users_by_id = db.one("users")
posts_by_user = db.many("posts", "user_id", order_by="id")


@batchy.task
async def profile(uid: int) -> dict[str, object]:
    user, posts = await batchy.gather(users_by_id(uid), posts_by_user(uid))
    return {"name": user["name"] if user else None, "posts": [p["title"] for p in posts]}


# -- app/views.py: a Flask or Django view is sync code: one batchy.run per request ----


def profiles_view(uids: list[int]) -> list[dict[str, object]]:
    return batchy.run(batchy.gather(*(profile(u) for u in uids)))


SCHEMA = """
    DROP TABLE IF EXISTS users; DROP TABLE IF EXISTS posts;
    CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);
    CREATE TABLE posts (id INTEGER PRIMARY KEY, user_id INTEGER, title TEXT);
    INSERT INTO users VALUES (1, 'ada'), (2, 'bob');
    INSERT INTO posts VALUES (10, 1, 'Hello'), (11, 1, 'Again'), (12, 2, 'Hi');
"""


def main() -> None:
    batchy.run(db.executescript(SCHEMA))
    for uids in ([1, 2], [2, 3]):  # two requests, each in a new event loop
        with record() as rec:
            print(profiles_view(uids))
        calls = [len(rec.calls(loader)) for loader in (users_by_id, posts_by_user)]
        print("  batch calls per loader:", calls)


if __name__ == "__main__":
    try:
        main()
    finally:
        db.close_now()
        shutil.rmtree(TMP)
