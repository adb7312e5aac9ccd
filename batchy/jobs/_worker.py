"""The worker: fetches jobs in batches, runs many at once in one batchy scheduler, leases them.

One loop does all the talking to the store, one round trip per turn
(:meth:`Backend.cycle`): it hands in the outcomes of every job that finished
since the last turn and claims as many new jobs as there are free slots. So
throughput is bounded by jobs per round trip, not round trips per job. Jobs run
as asyncio tasks on one loop, so their loads join the same batchy rounds: 100
concurrent jobs that each load a user make one batch call, not 100.

A second loop renews the leases of running jobs every ``heartbeat`` seconds, so
a long job is never redelivered while its worker lives, and a dead worker's jobs
come back once their lease (``lease`` seconds) runs out.

Shutdown (Sidekiq's signals): SIGTSTP is *quiet* (stop fetching, finish running
jobs, stay up); SIGTERM or SIGINT stop fetching, wait up to ``shutdown_timeout``
seconds, then hand unfinished jobs back to their queue; a second SIGINT stops at
once, leaving unfinished jobs to lease expiry.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import random
import signal
import socket
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ._errors import ConfigError
from ._hooks import JobHook, log
from ._model import Claimed, Envelope, Outcome, WorkerInfo, encode, new_id
from ._runner import run_job

if TYPE_CHECKING:
    from ._queue import Queue

__all__ = ["Worker", "parse_queues"]


def parse_queues(specs: Iterable[str | tuple[str, int]]) -> list[tuple[str, int | None]]:
    """``["critical,2", "default"]`` -> ``[("critical", 2), ("default", None)]``."""
    out: list[tuple[str, int | None]] = []
    for spec in specs:
        if isinstance(spec, tuple):
            name, weight_text = spec[0], str(spec[1])
        elif "," in spec:
            name, weight_text = spec.split(",", 1)
        else:
            out.append((spec, None))
            continue
        if not weight_text.isdigit() or int(weight_text) < 1:
            raise ConfigError(
                f"queue {name!r}: weight {weight_text!r} is not a positive integer; "
                "write -q critical,2 (critical is fetched twice as often) or -q critical"
            )
        out.append((name, int(weight_text)))
    return out


class Worker:
    """Runs jobs of one :class:`Queue`; ``await worker.run()`` until stopped.

    ``queues``: names in strict order (``["critical", "default"]``: default only
    when critical is empty) or weighted (``["critical,3", "default"]``: critical
    is tried first three times as often); by default every queue a job type of
    ``queue`` is declared on, with equal weights. ``burst=True`` returns once no job is
    ready or running (tests, scripts).
    """

    def __init__(
        self,
        queue: Queue,
        *,
        queues: Sequence[str | tuple[str, int]] | None = None,
        concurrency: int = 10,
        lease: float = 30.0,
        heartbeat: float | None = None,
        poll_interval: float = 0.5,
        shutdown_timeout: float = 25.0,
        hooks: Iterable[JobHook] = (),
        burst: bool = False,
    ) -> None:
        if type(concurrency) is not int or concurrency < 1:
            raise ConfigError(
                f"Worker concurrency={concurrency!r} must be an int >= 1 (jobs run at once)"
            )
        if not lease > 0 or not poll_interval > 0 or shutdown_timeout < 0:
            raise ConfigError(
                f"Worker lease={lease!r}, poll_interval={poll_interval!r} must be > 0 and "
                f"shutdown_timeout={shutdown_timeout!r} >= 0 (seconds)"
            )
        self.queue = queue
        # By default every declared queue, equally weighted: none starves another.
        declared = sorted({j.queue_name for j in queue.jobs.values()} or {queue.default_queue})
        specs = parse_queues(queues or [(name, 1) for name in declared])
        self.queue_specs = specs
        self.concurrency = concurrency
        self.lease = lease
        self.heartbeat = heartbeat if heartbeat is not None else lease / 3
        if not 0 < self.heartbeat < lease:
            raise ConfigError(
                f"Worker heartbeat={heartbeat!r} must be > 0 and shorter than lease={lease!r}, "
                "or a running job's lease runs out between renewals"
            )
        self.poll_interval = poll_interval
        self.shutdown_timeout = shutdown_timeout
        self.hooks = [*queue.hooks, *hooks]
        self.burst = burst
        self.id = f"{socket.gethostname()}:{os.getpid()}:{new_id()[:8]}"
        self.started_at = time.time()
        self.processed = 0
        self._running: dict[str, asyncio.Task[Outcome | None]] = {}
        self._outcomes: list[Outcome] = []
        self._wake: asyncio.Event | None = None
        self._quiet = False
        self._stopping = False
        self._interrupts = 0
        self._main: asyncio.Task[None] | None = None
        self._next_tick: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"<batchy.jobs.Worker {self.id} running={len(self._running)}>"

    # -- control ---------------------------------------------------------------------

    def quiet(self) -> None:
        """Stop fetching; running jobs finish. The worker stays up until stopped."""
        if not self._quiet:
            log.info("worker %s quiet: no new jobs", self.id)
        self._quiet = True
        self._poke()

    def stop(self) -> None:
        """Stop fetching, wait ``shutdown_timeout`` for running jobs, hand the rest back."""
        if not self._stopping:
            log.info("worker %s stopping (up to %ss)", self.id, self.shutdown_timeout)
        self._stopping = True
        self._quiet = True
        self._poke()

    def kill(self) -> None:
        """Stop at once; unfinished jobs come back when their leases expire."""
        log.warning("worker %s stopping now; unfinished jobs return after their lease", self.id)
        for task in list(self._running.values()):
            task.cancel()
        if self._main is not None:
            self._main.cancel()

    def _interrupt(self) -> None:
        self._interrupts += 1
        if self._interrupts == 1:
            self.stop()
        else:
            self.kill()

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # -- running ---------------------------------------------------------------------

    async def run(self, *, signals: bool = False) -> None:
        """Run until stopped (or idle, with ``burst``); ``signals`` installs the handlers."""
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._main = asyncio.current_task()
        installed: list[signal.Signals] = []
        if signals:
            for sig, handler in (
                (signal.SIGTERM, self.stop),
                (signal.SIGINT, self._interrupt),
                (signal.SIGTSTP, self.quiet),
            ):
                loop.add_signal_handler(sig, handler)
                installed.append(sig)
        beat = asyncio.create_task(self._heartbeat_loop())
        try:
            await self._beat()
            await self._loop()
            await self._shutdown()
        finally:
            beat.cancel()
            for sig in installed:
                loop.remove_signal_handler(sig)
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(self.queue.backend.forget_worker(self.id))

    def _order(self) -> list[str]:
        weighted = [(n, w) for n, w in self.queue_specs if w is not None]
        if not weighted:
            return [n for n, _ in self.queue_specs]
        # Sidekiq's weighted fetch: each queue appears `weight` times, shuffled;
        # the first appearance decides the order of this fetch.
        pool = [n for n, w in self.queue_specs for _ in range(w or 1)]
        random.shuffle(pool)
        return list(dict.fromkeys(pool))

    async def _loop(self) -> None:
        assert self._wake is not None
        backend = self.queue.backend
        while not self._stopping:
            now = time.time()
            await self._tick_periodics(now)
            free = 0 if self._quiet else self.concurrency - len(self._running)
            outcomes, self._outcomes = self._outcomes, []
            try:
                claimed = await backend.cycle(
                    outcomes, self._order(), free, self.id, self.lease, now
                )
            except Exception:
                log.exception(
                    "worker %s: the store failed; retrying in %ss", self.id, self.poll_interval
                )
                self._outcomes = outcomes + self._outcomes
                await asyncio.sleep(self.poll_interval)
                continue
            for job in claimed:
                self._start(job)
            if self.burst and not claimed and not self._running and not self._outcomes:
                return
            if claimed and len(self._running) < self.concurrency and not self._quiet:
                continue  # more may be ready: ask again before waiting
            self._wake.clear()
            if not self._outcomes:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll_interval)
            # Jobs that finish in the same batchy round wake us one after another
            # in this loop iteration: let them all land, then settle them together.
            await asyncio.sleep(0)

    def _start(self, job: Claimed) -> None:
        task = asyncio.create_task(run_job(self.queue, job, self.hooks, self.id, self.lease))
        self._running[job.id] = task
        task.add_done_callback(functools.partial(self._finished, job.id))

    def _finished(self, job_id: str, task: asyncio.Task[Outcome | None]) -> None:
        self._running.pop(job_id, None)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:  # run_job never raises: a bug; the lease will bring it back
            log.error("worker %s: job %s crashed the runner", self.id, job_id, exc_info=error)
            return
        outcome = task.result()
        if outcome is not None:
            self.processed += 1
            self._outcomes.append(outcome)
        self._poke()

    async def _shutdown(self) -> None:
        if self._running:
            log.info("worker %s waiting for %d job(s)", self.id, len(self._running))
            await asyncio.wait(list(self._running.values()), timeout=self.shutdown_timeout)
        released = [
            Outcome(job_id, "release") for job_id, task in self._running.items() if not task.done()
        ]
        for task in list(self._running.values()):
            task.cancel()
        if released:
            log.info("worker %s handing back %d unfinished job(s)", self.id, len(released))
        outcomes, self._outcomes = [*self._outcomes, *released], []
        if outcomes:
            await self.queue.backend.cycle(outcomes, [], 0, self.id, self.lease, time.time())

    # -- leases and periodic jobs ----------------------------------------------------

    async def _beat(self) -> None:
        info = WorkerInfo(
            self.id,
            socket.gethostname(),
            os.getpid(),
            tuple(n for n, _ in self.queue_specs),
            self.concurrency,
            tuple(self._running),
            self.started_at,
        )
        # The worker record lives a little longer than one lease, like the leases.
        lost = await self.queue.backend.heartbeat(
            info, list(self._running), self.lease, time.time()
        )
        for job_id in lost:
            if job_id in self._running:
                log.warning(
                    "worker %s lost the lease of job %s (it ran past its lease without a "
                    "heartbeat, so another worker may run it too); raise lease=",
                    self.id,
                    job_id,
                )

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat)
            try:
                await self._beat()
            except Exception:
                log.exception("worker %s: heartbeat failed; retrying", self.id)

    async def _tick_periodics(self, now: float) -> None:
        envelopes: list[Envelope] = []
        for periodic in self.queue.periodics:
            name = periodic.job.name
            due = self._next_tick.get(name)
            if due is None:
                self._next_tick[name] = periodic.schedule.next_after(now)
                continue
            if now < due:
                continue
            tick = due
            for _ in range(100_000):  # a stalled worker enqueues only the latest tick
                following = periodic.schedule.next_after(tick)
                if following > now or following <= tick:
                    break
                tick = following
            self._next_tick[name] = periodic.schedule.next_after(tick)
            message = periodic.job.call().message(now)
            interval = periodic.schedule.next_after(tick) - tick
            envelopes.append(
                Envelope(
                    message.id,
                    message.queue,
                    encode(message, self.queue.serializer),
                    unique=f"periodic:{name}:{tick:.6f}",
                    unique_ttl=max(3600.0, 3 * interval),
                )
            )
        if envelopes:
            try:
                await self.queue.backend.push(envelopes, now)
            except Exception:
                log.exception("worker %s: could not enqueue periodic jobs", self.id)

    def stats(self) -> dict[str, Any]:
        """Jobs processed and running, for tests and dashboards."""
        return {"processed": self.processed, "running": len(self._running)}
