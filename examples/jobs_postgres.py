"""Jobs enqueued in the application's own PostgreSQL transaction: they exist only if it commits.

The example of the jobs guide's PostgreSQL section (docs/guides/40-jobs.rst); the
tests run it and check what it prints::

    python examples/jobs_postgres.py postgresql://postgres@127.0.0.1:5432/test

It keeps its jobs in a schema of its own in that database, made here and dropped
at the end.
"""

from __future__ import annotations

import asyncio
import sys
import uuid

import psycopg

from batchy.jobs import ConfigError, JobType, Queue, Worker
from batchy_contrib.jobs.postgres import PostgresBackend


async def main(dsn: str, schema: str) -> None:
    backend = PostgresBackend(dsn, schema=schema)
    queue = Queue(backend)
    welcomed: list[int] = []

    @queue.job
    async def send_welcome(user_id: int) -> None:
        welcomed.append(user_id)

    await backend.migrate()  # at deploy time (or left to the first use)
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await conn.execute("CREATE TEMP TABLE users (id int PRIMARY KEY)")
        await conn.commit()
        # -- transactional enqueue --
        async with conn.transaction():
            await conn.execute("INSERT INTO users (id) VALUES (%s)", (42,))
            await send_welcome.options(connection=conn).enqueue(42)
            calls = [send_welcome.call(43), send_welcome.call(44)]
            await queue.enqueue_many(calls, connection=conn)  # the same transaction
        # An error rolls the transaction back, and its jobs with it:
        try:
            async with conn.transaction():
                await conn.execute("INSERT INTO users (id) VALUES (%s)", (45,))
                await send_welcome.options(connection=conn).enqueue(45)
                raise RuntimeError("card declined")
        except RuntimeError as error:
            print("rolled back:", error)  # no user 45, no job for it
        # -- end --
        await conn.set_autocommit(True)
        try:  # no transaction open: the job would commit at once, whatever came next
            await send_welcome.options(connection=conn).enqueue(46)
        except ConfigError as error:
            print("refused:", type(error).__name__)
    await asyncio.to_thread(flask_view, dsn, send_welcome)
    await Worker(queue, burst=True).run()
    print("welcomed:", sorted(welcomed))
    await backend.close()


def flask_view(dsn: str, send_welcome: JobType[[int], None]) -> None:
    """Sync code (a Flask or Django view): a blocking connection and ``enqueue_sync``."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        send_welcome.options(connection=conn).enqueue_sync(47)


if __name__ == "__main__":
    dsn = sys.argv[1] if len(sys.argv) > 1 else "postgresql://postgres@127.0.0.1:5432/test"
    schema = f"batchy_example_{uuid.uuid4().hex[:8]}"
    try:
        asyncio.run(main(dsn, schema))
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
