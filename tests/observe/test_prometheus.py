"""Prometheus metrics, scraped over HTTP: in one process, and summed over worker processes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from observe_helpers import Samples, scrape, value
from prometheus_client import CollectorRegistry

import batchy
from batchy.jobs import Info, MemoryBackend, Queue
from batchy_contrib.observe import prometheus

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "observe" / "metrics_worker.py"


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    """A registry of its own per test; its Metrics hook is unregistered afterwards."""
    registry = CollectorRegistry()
    yield registry
    prometheus.instrument(registry=registry).uninstrument()


def serve(registry: CollectorRegistry, *queues: Queue) -> tuple[str, Any]:
    server, _ = prometheus.start_http_server(0, *queues, addr="127.0.0.1", registry=registry)
    return f"http://127.0.0.1:{server.server_port}/metrics", server


@batchy.batched(name="users", max_batch_size=3)
def users(ids: list[int]) -> list[str]:
    if 13 in ids:
        raise ConnectionError("users server went away")
    return [f"user {i}" for i in ids]


@batchy.task
def page(ids: list[int]) -> Any:
    first = yield [users(i) for i in ids]
    again = yield users(ids[0])  # the scope's cache answers
    return first, again


async def scrape_from_loop(registry: CollectorRegistry, *queues: Queue) -> Samples:
    """Serve and scrape from inside the event loop: the stores are asked on it."""
    url, server = serve(registry, *queues)
    try:
        return await asyncio.to_thread(scrape, url)
    finally:
        server.shutdown()


def test_batch_sizes_latencies_rounds_and_cache_hits(registry: CollectorRegistry) -> None:
    prometheus.instrument(registry=registry)
    batchy.run(page([1, 2, 3, 4]))  # one round: calls of 3 and 1 keys, then a hit
    batchy.run(page([5]))
    with pytest.raises(batchy.LoaderError):
        batchy.run(users(13))
    url, server = serve(registry)
    try:
        got = scrape(url)
    finally:
        server.shutdown()
    loader = {"loader": "users"}
    buckets = {
        le: value(got, "batchy_batch_keys_bucket", le=le, **loader) for le in ("1.0", "2.0", "5.0")
    }
    assert buckets == {"1.0": 3.0, "2.0": 3.0, "5.0": 4.0}  # keys 3, 1, 1, 1
    assert value(got, "batchy_batch_keys_count", **loader) == 4
    assert value(got, "batchy_batch_keys_sum", **loader) == 6
    assert value(got, "batchy_batch_duration_seconds_count", **loader) == 4
    assert value(got, "batchy_batch_errors_total", **loader) == 1
    # Three runs, three scopes: 1, 1 and 1 rounds.
    assert value(got, "batchy_scope_rounds_count") == 3
    assert value(got, "batchy_scope_rounds_sum") == 3
    assert value(got, "batchy_loads_total", **loader) == 8  # 5 + 1 keys, 2 hits
    assert value(got, "batchy_cache_hits_total", **loader) == 2


def test_jobs_processed_failed_retried_dead_and_queue_sizes(registry: CollectorRegistry) -> None:
    queue = Queue(MemoryBackend())

    @queue.job(name="flaky", retries=1, backoff=lambda done, error: 0.0)
    async def flaky(n: int) -> int:
        if n < 0:
            raise ValueError(n)
        return n

    @queue.job(name="later", queue="later")
    async def later() -> None: ...

    async def main() -> Samples:
        prometheus.instrument(queue, registry=registry)
        for n in (1, 2, -1):
            await flaky.enqueue(n)
        await later.enqueue()
        await batchy.jobs.Worker(queue, queues=["default"], burst=True, poll_interval=0.01).run()
        return await scrape_from_loop(registry, queue)

    got = asyncio.run(main())
    job = {"job": "flaky", "queue": "default"}
    assert value(got, "batchy_jobs_enqueued_total", **job) == 3
    assert value(got, "batchy_jobs_enqueued_total", job="later", queue="later") == 1
    assert value(got, "batchy_jobs_processed_total", **job) == 4  # 1, 2, and -1 twice
    assert value(got, "batchy_jobs_failed_total", **job) == 2
    assert value(got, "batchy_jobs_retried_total", **job) == 1
    assert value(got, "batchy_jobs_dead_total", **job) == 1
    assert value(got, "batchy_job_duration_seconds_count", **job) == 4
    assert value(got, "batchy_store_up") == 1
    assert value(got, "batchy_queue_size", queue="later") == 1
    assert value(got, "batchy_queue_size", queue="default") == 0
    assert value(got, "batchy_queue_latency_seconds", queue="later") > 0  # type: ignore[operator]
    assert value(got, "batchy_dead_jobs") == 1
    assert value(got, "batchy_workers_alive") == 0  # the burst worker has left


def test_a_run_cancelled_by_an_operator_is_counted(registry: CollectorRegistry) -> None:
    """A cancelled attempt ended (processed, cancelled) without failing; it was not counted."""
    queue = Queue(MemoryBackend())
    started = asyncio.Event()

    @queue.job(name="stuck")
    async def stuck() -> None:
        started.set()
        await asyncio.sleep(60)

    async def main() -> Samples:
        prometheus.instrument(queue, registry=registry)
        handle = await stuck.enqueue()
        worker = batchy.jobs.Worker(queue, poll_interval=0.01)
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(started.wait(), 5)
        assert await queue.admin.cancel(handle.id) == 1
        while (await queue.admin.job(handle.id)).state != "cancelled":
            await asyncio.sleep(0.01)
        worker.stop()
        await running
        return await scrape_from_loop(registry, queue)

    got = asyncio.run(main())
    job = {"job": "stuck", "queue": "default"}
    assert value(got, "batchy_jobs_processed_total", **job) == 1
    assert value(got, "batchy_jobs_cancelled_total", **job) == 1
    assert value(got, "batchy_jobs_failed_total", **job) in (None, 0)
    assert value(got, "batchy_job_duration_seconds_count", **job) == 1


def test_a_store_that_does_not_answer_is_reported_down(registry: CollectorRegistry) -> None:
    class Down(MemoryBackend):
        async def info(self, now: float) -> Info:
            raise ConnectionError("store unreachable")

    url, server = serve(registry, Queue(Down()))
    try:
        got = scrape(url)
    finally:
        server.shutdown()
    assert value(got, "batchy_store_up") == 0
    assert not any(name == "batchy_queue_size" for name, _ in got)


def test_scraping_on_the_loop_that_asks_the_store_is_refused() -> None:
    async def main() -> None:
        collector = prometheus.QueueCollector(Queue(MemoryBackend()))
        list(collector.collect())

    with pytest.raises(batchy.UsageError) as info:
        asyncio.run(main())
    assert str(info.value).startswith("the batchy queue metrics of <batchy.jobs.Queue")
    assert str(info.value).endswith(
        "were scraped on the event loop that asks the store, which would wait on itself; "
        "serve metrics from a thread (batchy_contrib.observe.prometheus.start_http_server does)"
    )


def test_instrument_twice_counts_once(registry: CollectorRegistry) -> None:
    queue = Queue(MemoryBackend())
    first = prometheus.instrument(registry=registry)
    assert prometheus.instrument(queue, registry=registry) is first
    assert queue.hooks == [first]
    batchy.run(users(1))
    assert registry.get_sample_value("batchy_batch_keys_count", {"loader": "users"}) == 1
    first.uninstrument()
    batchy.run(users(2))
    assert registry.get_sample_value("batchy_batch_keys_count", {"loader": "users"}) == 1
    assert queue.hooks == []


def test_wrong_arguments_name_the_fix() -> None:
    with pytest.raises(batchy.UsageError) as info:
        prometheus.instrument("jobs.db")  # type: ignore[arg-type]
    assert str(info.value) == (
        "prometheus.instrument() takes batchy.jobs.Queue objects to count jobs of, got "
        "'jobs.db' (str); pass the Queue your jobs are declared on, or nothing to count "
        "batch calls only"
    )
    with pytest.raises(batchy.UsageError) as info:
        prometheus.QueueCollector("jobs.db")  # type: ignore[arg-type]
    assert str(info.value) == (
        "QueueCollector(queue) takes a batchy.jobs.Queue, got 'jobs.db' (str); pass the Queue "
        "whose store to ask"
    )


# -- several worker processes, one endpoint ---------------------------------------------


def test_two_worker_processes_are_summed_by_one_endpoint(tmp_path: Path) -> None:
    """The example's workers (one per queue) and server, each a process, share one directory."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prom")}
    (tmp_path / "prom").mkdir()
    db = str(tmp_path / "jobs.db")

    def example(*args: str, **options: Any) -> subprocess.Popen[str]:
        command = [sys.executable, str(EXAMPLE), *args, "--db", db]
        return subprocess.Popen(command, env=env, text=True, **options)

    enqueue = example("enqueue")
    assert enqueue.wait(timeout=60) == 0
    processes = [
        example("worker", "--queue", "emails"),
        example("worker", "--queue", "reports"),
        example("serve", "--port", "0", stdout=subprocess.PIPE),
    ]
    try:
        line = processes[2].stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("serving http://127.0.0.1:"), line
        url = line.split()[1]
        got = scrape(url)
        deadline = time.monotonic() + 60
        # Until both workers are done and heard from: polled, never timed.
        while not (
            value(got, "batchy_jobs_processed_total", job="report", queue="reports") == 4
            and value(got, "batchy_jobs_processed_total", job="welcome", queue="emails") == 3
            and value(got, "batchy_workers_alive") == 2
        ):
            assert time.monotonic() < deadline, f"workers did not finish: {got}"
            time.sleep(0.1)
            got = scrape(url)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)
            if process.stdout is not None:
                process.stdout.close()
    # Every process wrote its own files; the endpoint summed them.
    pids = {path.stem.rpartition("_")[2] for path in (tmp_path / "prom").glob("*.db")}
    assert len(pids) >= 3  # the enqueuer and the two workers
    report, welcome = {"job": "report", "queue": "reports"}, {"job": "welcome", "queue": "emails"}
    assert value(got, "batchy_jobs_enqueued_total", **welcome) == 4
    assert value(got, "batchy_jobs_enqueued_total", job="welcome", queue="later") == 2
    assert value(got, "batchy_jobs_enqueued_total", **report) == 3
    assert value(got, "batchy_jobs_failed_total", **report) == 2
    assert value(got, "batchy_jobs_retried_total", **report) == 1
    assert value(got, "batchy_jobs_dead_total", **report) == 1
    assert value(got, "batchy_jobs_failed_total", **welcome) is None
    # Keys 1, 2, 3 (one worker) and 100-104, 200-204 (the other): 13 in all.
    assert value(got, "batchy_batch_keys_sum", loader="users_by_id") == 13
    assert value(got, "batchy_loads_total", loader="users_by_id") == 16
    assert value(got, "batchy_cache_hits_total", loader="users_by_id") == 3
    # Seven attempts, each its own scope: 5 with one round, the failing report's two with none.
    assert value(got, "batchy_scope_rounds_count") == 7
    assert value(got, "batchy_scope_rounds_sum") == 5
    assert value(got, "batchy_queue_size", queue="later") == 2
    assert value(got, "batchy_queue_scheduled", queue="emails") == 1
    assert value(got, "batchy_dead_jobs") == 1
    assert value(got, "batchy_store_up") == 1


def test_queues_of_one_store_are_served_once_and_of_two_stores_refused(
    registry: CollectorRegistry, tmp_path: Path
) -> None:
    # start_http_server(port, q1, q2) took *queues but registered a collector per
    # queue, every one with the same metric names: prometheus_client refused the
    # second ("Duplicated timeseries"), so two queues never worked.
    from batchy.jobs import SQLiteBackend

    store = SQLiteBackend(tmp_path / "jobs.db")
    mail, billing = Queue(store, default_queue="mail"), Queue(store, default_queue="billing")

    async def main() -> Samples:
        await mail.enqueue_many([])
        return await scrape_from_loop(registry, mail, billing)

    got = asyncio.run(main())
    assert value(got, "batchy_store_up") == 1
    other = Queue(SQLiteBackend(tmp_path / "other.db"))
    with pytest.raises(batchy.UsageError) as refused:
        prometheus.start_http_server(0, mail, other, addr="127.0.0.1", registry=CollectorRegistry())
    assert str(refused.value).startswith("start_http_server() got queues of 2 stores (SQLite ")
    assert str(refused.value).endswith(
        "serve each store's queues from a port of their own, each with registry=CollectorRegistry()"
    )
