"""Prometheus metrics: batch sizes and latencies, rounds per scope, cache hits, jobs and queues.

::

    from batchy_contrib.observe import prometheus

    prometheus.instrument(queue)              # in every process that runs handlers or jobs
    prometheus.start_http_server(9100, queue) # in one of them: /metrics, with the queue's sizes

The engine's and the jobs' metrics come from batchy's hooks; the queues' come
from a collector that asks the store (``queue.info()``) each time Prometheus
scrapes, so they are the store's numbers whichever process serves them:

==================================  =========  ===========  =======================================
metric                              type       labels       what
==================================  =========  ===========  =======================================
``batchy_batch_keys``               histogram  loader       keys per batch call
``batchy_batch_duration_seconds``   histogram  loader       how long a batch call took
``batchy_batch_errors_total``       counter    loader       batch calls that failed as a whole
``batchy_scope_rounds``             histogram               rounds per scope (a request, a job, a
                                                            ``batchy.run``), when the scope ends
``batchy_loads_total``              counter    loader       loads of the scopes that ended
``batchy_cache_hits_total``         counter    loader       ... of them answered by a scope cache
``batchy_jobs_enqueued_total``      counter    job, queue   jobs enqueued
``batchy_jobs_processed_total``     counter    job, queue   attempts that ended (done, retry, dead)
``batchy_jobs_failed_total``        counter    job, queue   ... of them that raised (retry or dead)
``batchy_jobs_retried_total``       counter    job, queue   ... of them to be run again
``batchy_jobs_dead_total``          counter    job, queue   ... of them gone to the dead set
``batchy_job_duration_seconds``     histogram  job, queue   how long an attempt ran
``batchy_queue_size``               gauge      queue        jobs ready to run
``batchy_queue_latency_seconds``    gauge      queue        how long the oldest ready job has waited
``batchy_queue_running``            gauge      queue        jobs running (and ``scheduled``,
                                                            ``retrying``: waiting for their time)
``batchy_dead_jobs``                gauge                   jobs in the dead set
``batchy_workers_alive``            gauge                   workers the store heard from lately
``batchy_store_up``                 gauge                   1 if the store answered the scrape
==================================  =========  ===========  =======================================

The cache hit ratio of a loader is ``rate(batchy_cache_hits_total[5m]) /
rate(batchy_loads_total[5m])``. Several worker processes: set
``PROMETHEUS_MULTIPROC_DIR`` to an empty directory before they start (before
they import prometheus_client); each writes its metrics there and
:func:`start_http_server`, in any one process, serves their sums.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from .._extras import extra

with extra(__name__, "'batchy[prometheus]'", "prometheus_client"):
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
    from prometheus_client import start_http_server as serve_registry
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.multiprocess import MultiProcessCollector
    from prometheus_client.registry import Collector

import batchy
from batchy.jobs import Info, JobEvent, JobHook, Queue

__all__ = ["Metrics", "QueueCollector", "instrument", "start_http_server"]

log = logging.getLogger("batchy.metrics")

KEYS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
ROUNDS_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50)
JOB_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800)


class Metrics(batchy.Hook, JobHook):
    """The hook that counts batchy's events into Prometheus metrics; see :func:`instrument`."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        def counter(name: str, doc: str, labels: tuple[str, ...]) -> Counter:
            return Counter(name, doc, labels, registry=registry)

        def histogram(
            name: str, doc: str, labels: tuple[str, ...], buckets: tuple[float, ...]
        ) -> Histogram:
            return Histogram(name, doc, labels, registry=registry, buckets=buckets)

        loader, job = ("loader",), ("job", "queue")
        self.batch_keys = histogram(
            "batchy_batch_keys", "Keys per batch call", loader, KEYS_BUCKETS
        )
        self.batch_seconds = histogram(
            "batchy_batch_duration_seconds", "Duration of batch calls", loader, SECONDS_BUCKETS
        )
        self.batch_errors = counter("batchy_batch_errors", "Batch calls that failed", loader)
        self.scope_rounds = histogram(
            "batchy_scope_rounds", "Rounds per scope (request, job, run)", (), ROUNDS_BUCKETS
        )
        self.loads = counter("batchy_loads", "Loads of the scopes that ended", loader)
        self.hits = counter("batchy_cache_hits", "Loads answered by the scope's cache", loader)
        self.enqueued = counter("batchy_jobs_enqueued", "Jobs enqueued", job)
        self.processed = counter("batchy_jobs_processed", "Job attempts that ended", job)
        self.failed = counter("batchy_jobs_failed", "Job attempts that raised", job)
        self.retried = counter("batchy_jobs_retried", "Job attempts to be run again", job)
        self.dead = counter("batchy_jobs_dead", "Jobs gone to the dead set", job)
        self.cancelled = counter(
            "batchy_jobs_cancelled", "Running jobs an operator cancelled (to the dead set)", job
        )
        self.job_seconds = histogram(
            "batchy_job_duration_seconds", "Duration of job attempts", job, JOB_BUCKETS
        )
        self.queues: list[Queue] = []
        self.installed = False

    def uninstrument(self) -> None:
        """Stop counting (the metrics stay registered, with their values)."""
        batchy.remove_hook(self)
        self.installed = False
        for queue in self.queues:
            if self in queue.hooks:
                queue.hooks.remove(self)
        self.queues.clear()

    # -- the engine -------------------------------------------------------------------

    def batch_flushed(self, event: batchy.BatchEvent) -> None:
        self.batch_keys.labels(event.loader).observe(len(event.keys))
        self.batch_seconds.labels(event.loader).observe(event.duration)
        if event.error is not None:
            self.batch_errors.labels(event.loader).inc()

    def scope_exited(self, scope: batchy.Scope) -> None:
        stats = scope.stats
        self.scope_rounds.observe(stats.rounds)
        hits = stats.hits
        for loader in stats.keys.keys() | hits.keys():
            self.loads.labels(loader).inc(stats.keys.get(loader, 0) + hits.get(loader, 0))
        for loader, count in hits.items():
            self.hits.labels(loader).inc(count)

    # -- jobs -------------------------------------------------------------------------

    def job_enqueued(self, event: JobEvent) -> None:
        self.enqueued.labels(event.job, event.queue).inc()

    def job_finished(self, event: JobEvent) -> None:
        if not event.ends_attempt:
            return  # lost (another worker runs it) or released at shutdown
        labels = (event.job, event.queue)
        self.processed.labels(*labels).inc()
        self.job_seconds.labels(*labels).observe(event.duration)
        if event.outcome == "cancelled":  # an operator's cancel: not a failure
            self.cancelled.labels(*labels).inc()
        elif event.outcome != "done":
            self.failed.labels(*labels).inc()
            (self.retried if event.outcome == "retry" else self.dead).labels(*labels).inc()


# One Metrics per registry: a metric name can be registered only once in each.
_metrics: weakref.WeakKeyDictionary[CollectorRegistry, Metrics] = weakref.WeakKeyDictionary()


def instrument(*queues: Queue, registry: CollectorRegistry = REGISTRY) -> Metrics:
    """Count batch calls, scopes and the jobs of ``queues`` in this process.

    Call it before making workers (a worker copies its queue's hooks when it is
    made). Calling it again (with more queues) adds to what it counts.
    """
    for queue in queues:
        if not isinstance(queue, Queue):
            raise batchy.UsageError(
                f"prometheus.instrument() takes batchy.jobs.Queue objects to count jobs of, got "
                f"{batchy.short_repr(queue)} ({type(queue).__name__}); pass the Queue your "
                "jobs are declared on, or nothing to count batch calls only"
            )
    metrics = _metrics.get(registry)
    if metrics is None:
        metrics = _metrics[registry] = Metrics(registry)
    if not metrics.installed:
        batchy.add_hook(metrics)
        metrics.installed = True
    for queue in queues:
        if metrics not in queue.hooks:
            queue.hooks.append(metrics)
            metrics.queues.append(queue)
    return metrics


class QueueCollector(Collector):
    """Asks the store at scrape time: queue sizes and latency, dead jobs, workers alive.

    The question runs on the event loop the store's connections belong to:
    ``loop``, else the loop running where the collector is made, else a loop of
    the collector's own in a thread of its own (a process that only serves
    metrics). Scrapes must come from another thread than that loop's (as
    :func:`start_http_server`'s do). A store that does not answer within
    ``timeout`` seconds gives ``batchy_store_up 0`` and no queue metrics.
    """

    def __init__(
        self,
        queue: Queue,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        timeout: float = 5.0,
    ) -> None:
        if not isinstance(queue, Queue):
            raise batchy.UsageError(
                f"QueueCollector(queue) takes a batchy.jobs.Queue, got {batchy.short_repr(queue)} "
                f"({type(queue).__name__}); pass the Queue whose store to ask"
            )
        self.queue = queue
        self.timeout = timeout
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
        self._loop = loop
        self._lock = threading.Lock()

    def describe(self) -> Iterator[Metric]:
        # Names only, for the registry: describing must not ask the store.
        yield from self._families(None)

    def collect(self) -> Iterator[Metric]:
        try:
            info = self._ask()
        except batchy.UsageError:
            raise
        except Exception as error:
            log.warning("batchy metrics: %r did not answer: %r", self.queue.backend, error)
            info = None
        yield from self._families(info)

    def _ask(self) -> Info:
        loop = self._loop if self._loop is not None else self._own_loop()
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is loop:
            raise batchy.UsageError(
                f"the batchy queue metrics of {self.queue!r} were scraped on the event loop that "
                "asks the store, which would wait on itself; serve metrics from a thread "
                "(batchy_contrib.observe.prometheus.start_http_server does)"
            )
        future = asyncio.run_coroutine_threadsafe(self.queue.info(), loop)
        try:
            return future.result(self.timeout)
        finally:
            future.cancel()

    def _own_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="batchy-metrics-store", daemon=True
                )
                thread.start()
                self._loop = loop
            return self._loop

    @staticmethod
    def _families(info: Info | None) -> Iterator[Metric]:
        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=labels)

        up = gauge("batchy_store_up", "1 if the job store answered this scrape")
        up.add_metric([], 0 if info is None else 1)
        yield up
        per_queue: list[tuple[GaugeMetricFamily, str]] = [
            (gauge("batchy_queue_size", "Jobs ready to run", ("queue",)), "size"),
            (
                gauge("batchy_queue_latency_seconds", "Age of the oldest ready job", ("queue",)),
                "latency",
            ),
            (gauge("batchy_queue_running", "Jobs running", ("queue",)), "running"),
            (
                gauge("batchy_queue_scheduled", "Jobs waiting for their time", ("queue",)),
                "scheduled",
            ),
            (gauge("batchy_queue_retrying", "Jobs waiting to be retried", ("queue",)), "retrying"),
        ]
        dead = gauge("batchy_dead_jobs", "Jobs in the dead set")
        workers = gauge("batchy_workers_alive", "Workers the store heard from lately")
        if info is not None:
            for queue in info.queues:
                for family, field in per_queue:
                    family.add_metric([queue.name], getattr(queue, field))
            dead.add_metric([], info.dead)
            workers.add_metric([], len(info.workers))
        for family, _ in per_queue:
            yield family
        yield dead
        yield workers


def start_http_server(
    port: int, *queues: Queue, addr: str = "0.0.0.0", registry: CollectorRegistry | None = None
) -> tuple[Any, threading.Thread]:
    """Serve ``/metrics`` from a thread: batchy's metrics and the numbers of the queues' store.

    Queues on one store (the same location) are asked once. The store's numbers
    carry no store label, so queues on different stores are refused: serve each
    store from a port of its own, with a ``registry`` of its own.

    ``registry`` defaults to prometheus_client's, or, when ``PROMETHEUS_MULTIPROC_DIR``
    is set, to a new one that sums every process's metrics from that directory.
    Call it from the code that runs the event loop the queues' stores use (or
    before any loop: the collector then asks on a loop of its own). Returns
    prometheus_client's ``(server, thread)``; ``server.server_port`` is the port
    (pass 0 for a free one), ``server.shutdown()`` stops it.
    """
    if registry is None:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            registry = CollectorRegistry()
            MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        else:
            registry = REGISTRY
    stores: dict[str, Queue] = {}
    for queue in queues:
        stores.setdefault(queue.admin.store, queue)
    if len(stores) > 1:
        raise batchy.UsageError(
            f"start_http_server() got queues of {len(stores)} stores ({'; '.join(stores)}), "
            "whose numbers would share metric names with no store label (prometheus_client "
            "refuses them as duplicated timeseries); serve each store's queues from a port "
            "of their own, each with registry=CollectorRegistry()"
        )
    for queue in stores.values():
        registry.register(QueueCollector(queue))
    return serve_registry(port, addr, registry)
