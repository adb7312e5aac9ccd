"""Operating a queue from Python: list, inspect, run now, retry and cancel jobs.

The example of the Operations guide (docs/guides/43-operations.rst); the tests
run it and check what it prints::

    python examples/operate_jobs.py        # on a SQLite file in a temporary directory
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from batchy.jobs import JobNotFound, Queue, Worker


async def main(path: Path) -> None:
    queue = Queue(path)

    @queue.job(name="mail", backoff=lambda retries, error: 600.0)
    async def mail(user_id: int) -> None:
        if user_id == 2:
            raise ConnectionError("smtp down")

    @queue.job(name="report", retries=0)
    async def report(day: str) -> None:
        raise ValueError(f"no data for {day}")

    started = asyncio.Event()

    @queue.job(name="export")
    async def export(rows: int) -> int:
        started.set()
        for _ in range(rows):
            await asyncio.sleep(0.01)  # each await is where a cancel can land
        return rows

    await queue.enqueue_many([mail.call(1), mail.call(2), report.call("2026-01-01")])
    await Worker(queue, burst=True).run()

    # -- listing --
    admin = queue.admin
    page = await admin.jobs("retrying", queue="default", limit=50)
    for job in page.jobs:
        print(job.state, job.job, job.args, f"attempts={job.attempts}", job.error)
    # page.next, if not None, is the cursor of the next page: admin.jobs(..., after=page.next)

    # -- details --
    job = await admin.job(page.jobs[0].id)
    print(job.traceback.splitlines()[-1])  # the end of the last failure's traceback
    print(f"next run in {job.next_run - time.time():.0f}s")

    # -- actions --
    await admin.run_now(job.id)  # due now instead of in ten minutes
    dead = await admin.jobs("dead")
    print([(j.job, j.error) for j in dead.jobs])
    print("retried", await admin.retry_dead(job="report"))  # all dead jobs of that type
    await Worker(queue, burst=True).run()  # both fail again
    try:
        await admin.delete("no-such-id")
    except JobNotFound as error:
        print(type(error).__name__, str(error).split(" is not in ")[0])

    # -- cancelling a running job --
    handle = await export.enqueue(10_000)
    worker = Worker(queue, concurrency=5)
    running = asyncio.create_task(worker.run())
    await started.wait()
    (live,) = await admin.workers()
    print(f"busy {len(live.running)}/{live.concurrency}")
    await admin.cancel(handle.id)  # the handler gets CancelledError at its next await
    while (await handle.status()).state != "dead":
        await asyncio.sleep(0.02)
    print((await admin.job(handle.id)).state)
    worker.stop()
    await running
    await queue.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(Path(sys.argv[1]) if sys.argv[1:] else Path(tmp) / "jobs.db"))
