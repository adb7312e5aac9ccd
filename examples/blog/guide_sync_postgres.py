"""The PostgreSQL guide's sync example (docs/guides/24-postgres.rst): module-level loaders.

python examples/blog/guide_sync_postgres.py postgresql://postgres@127.0.0.1:5432/test
"""

import sys

import batchy
from batchy.testing import record
from batchy_contrib.sql import postgres

URL = sys.argv[1] if len(sys.argv) > 1 else "postgresql://postgres@127.0.0.1:5432/test"

# -- app/data.py: declared at import time, in sync code; nothing connects yet ---------

db = postgres.Database.from_url(URL, max_size=4)  # one pool per event loop, on first use
users_by_id = db.one("guide_sync_users")
posts_by_user = db.many("guide_sync_posts", "user_id", order_by="id")


@batchy.task
async def profile(uid: int) -> dict[str, object]:
    user, posts = await batchy.gather(users_by_id(uid), posts_by_user(uid))
    return {"name": user["name"] if user else None, "posts": [p["title"] for p in posts]}


# -- app/views.py: a Flask or Django view is sync code: one batchy.run per request ----


def profiles_view(uids: list[int]) -> list[dict[str, object]]:
    return batchy.run(batchy.gather(*(profile(u) for u in uids)))


async def setup() -> None:
    await db.execute("DROP TABLE IF EXISTS guide_sync_users, guide_sync_posts")
    await db.execute("CREATE TABLE guide_sync_users (id INT PRIMARY KEY, name VARCHAR(50))")
    await db.execute(
        "CREATE TABLE guide_sync_posts (id INT PRIMARY KEY, user_id INT, title VARCHAR(50))"
    )
    await db.executemany("INSERT INTO guide_sync_users VALUES (%s, %s)", [(1, "ada"), (2, "bob")])
    await db.executemany(
        "INSERT INTO guide_sync_posts VALUES (%s, %s, %s)",
        [(10, 1, "Hello"), (11, 1, "Again"), (12, 2, "Hi")],
    )


def main() -> None:
    batchy.run(setup())  # a script's setup: a loop (and a pool) of its own
    for uids in ([1, 2], [2, 3]):  # two requests, each in a new event loop
        with record() as rec:
            print(profiles_view(uids))
        calls = [len(rec.calls(loader)) for loader in (users_by_id, posts_by_user)]
        print("  batch calls per loader:", calls)
    batchy.run(db.execute("DROP TABLE guide_sync_users, guide_sync_posts"))


if __name__ == "__main__":
    main()
