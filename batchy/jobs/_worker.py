"""The worker: fetches jobs in batches, runs many at once in one batchy scheduler, leases them.

One loop does all the talking to the store, one round trip per turn
(:meth:`Backend.cycle`): it hands in the outcomes of every job that finished
since the last turn and claims a job per free slot (``prefetch`` more: _ahead).
So throughput is bounded by jobs per round trip, not round trips per job. Jobs run
as batchy tasks on one loop (_inflight), so their loads join the same batchy
rounds: 100 concurrent jobs that each load a user make one batch call, not 100.

A second loop renews the leases of running jobs every ``heartbeat`` seconds, so
a long job is never redelivered while its worker lives, and a dead worker's jobs
come back once their lease (``lease`` seconds) runs out.

Each claim comes with a lease token (fencing): the worker's heartbeats and the
job's outcome carry it, and the store refuses them once the lease has moved to
another worker. A worker that finds out (a refused heartbeat, outcome or
progress save: its loop was blocked or the process paused past the lease) logs
it once, stops renewing the job, cancels its run if it still goes on and drops
its outcome: only the new holder's word counts.

Shutdown (Sidekiq's signals): SIGTSTP is *quiet* (stop fetching, finish running
jobs, stay up); SIGTERM or SIGINT stop fetching, wait up to ``shutdown_timeout``
seconds, then hand unfinished jobs back to their queue; a second SIGINT stops at
once, leaving unfinished jobs to lease expiry.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import Awaitable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import batchy

from . import _clock
from ._activity import Tally
from ._ahead import Ahead
from ._fetch import fetch_order, parse_queues
from ._goodbye import gave_up, hand_in_last, take_leave
from ._hooks import JobHook, log
from ._inflight import InFlight
from ._leases import Claim, Leases
from ._model import Claimed, Claims, Outcome, WorkerInfo, new_id
from ._options import checked_options
from ._outage import NoAnswer, Outage, ensure_quiet, launch, pause, within
from ._ticks import Ticks
from ._wake import StoreWait

if TYPE_CHECKING:
    from ._queue import Queue

__all__ = ["Worker"]

T = TypeVar("T")


class Worker:
    """Runs jobs of one :class:`Queue`; ``await worker.run()`` until stopped.

    ``queues``: names in strict order (``["critical", "default"]``: default only
    when critical is empty) or weighted (``["critical,3", "default"]``: critical
    is tried first three times as often); by default every queue a job type of
    ``queue`` is declared on, with equal weights. ``burst=True`` returns once no job is
    ready or running (tests, scripts). ``prefetch`` claims up to that many jobs
    beyond ``concurrency``, to begin as soon as slots free (see _ahead): for short
    jobs, whose turns with the store it overlaps; off by default.
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
        prefetch: int = 0,
    ) -> None:
        heartbeat = checked_options(
            concurrency, prefetch, lease, heartbeat, poll_interval, shutdown_timeout
        )
        self.queue = queue
        # By default every declared queue, equally weighted: none starves another.
        declared = sorted({j.queue_name for j in queue.jobs.values()} or {queue.default_queue})
        specs = parse_queues(queues or [(name, 1) for name in declared])
        self.queue_specs = specs
        self.concurrency = concurrency
        self.lease = lease
        self.heartbeat = heartbeat
        self.poll_interval = poll_interval
        self.shutdown_timeout = shutdown_timeout
        self.hooks = [*queue.hooks, *hooks]
        # Activity counters for dashboards (see _activity), written beside the heartbeat.
        self._tally = Tally()
        self.hooks.append(self._tally)
        self.burst = burst
        self.id = f"{socket.gethostname()}:{os.getpid()}:{new_id()[:8]}"
        self.started_at = _clock.now()
        self.processed = 0
        # By claim (job id, lease token): a job lost and claimed again runs twice.
        self._leases = Leases(self.id, lease, queue.serializer)
        self._running = InFlight(
            queue, self.hooks, self._tally, self.id, self._leases, self._finished
        )
        self._outcomes: list[Outcome] = []
        self._ahead = Ahead(prefetch)
        self._outage = Outage(self.id, poll_interval)
        self._wake: asyncio.Event | None = None
        self._halt: asyncio.Event | None = None  # set by stop(): ends a back-off wait
        self._silent = False  # the store's last answer was none: a call ran out of time
        self._unreached = False  # its last call could not reach it (refused, no connection)
        self._flushing: asyncio.Future[None] | None = None  # the heartbeat's counter write
        self._quiet = False
        self._stopping = False
        self._interrupts = 0
        self._main: asyncio.Task[None] | None = None
        self._ticks = Ticks(queue.periodics, queue.serializer)
        names = [name for name, _ in self.queue_specs]
        self._store_wait = StoreWait(queue.backend, self.id, names, poll_interval, self._poke)
        self._beats_end = asyncio.Event()  # set as run() ends: the heartbeat loop returns

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
        if self._halt is not None:
            self._halt.set()

    def kill(self) -> None:
        """Stop at once; unfinished jobs come back when their leases expire."""
        log.warning("worker %s stopping now; unfinished jobs return after their lease", self.id)
        self._running.stop()
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
        self.queue.check_runnable("Worker")
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._halt = asyncio.Event()
        if self._stopping:
            self._halt.set()
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
        batchy.add_hook(self._tally)  # counts the batch calls of this worker's jobs
        self._beats_end = asyncio.Event()
        beat = asyncio.create_task(self._heartbeat_loop())
        try:
            try:
                await self._beat()
            except Exception as error:
                # A store that is down at start is an outage like any other: the
                # cycles below back off until it is back (and log it once).
                self._outage.failed(error, "heartbeat")
            await self._loop()
            await self._shutdown()
        finally:
            # Cancelled from outside (asyncio.run on Ctrl-C), runs may still go on:
            # asyncio does not cancel batchy tasks at its end, so stop them here,
            # and give their cleanup a moment before the loop may close.
            self._running.stop()
            self._beats_end.set()
            self._store_wait.cancel()
            for sig in installed:
                loop.remove_signal_handler(sig)
            batchy.remove_hook(self._tally)
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._running.wait(max(1.0, self.heartbeat))
                times = (self.lease, self.heartbeat)
                background = [beat, self._store_wait.task, self._flushing]
                gone = "did not answer" if self._silent else None
                gone = "could not be reached" if self._unreached else gone
                await take_leave(
                    self.id, self.queue.backend, times, background, self._tally, gone=gone
                )

    async def _loop(self) -> None:
        assert self._wake is not None
        backend = self.queue.backend
        while not self._stopping:
            now = _clock.now()
            await self._ticks.push_due(
                backend, now, self.queue._announce, self._outage.failed, self._bounded
            )
            if self._stopping:
                # Stopped while the ticks went out: a turn now would claim nothing,
                # and its outcomes go in at the stop's own last turn. An unanswered
                # push must not make the stop wait a lease more for this one.
                break
            if self._quiet and self._ahead:
                self._outcomes += self._ahead.hand_back(self._leases)
            # Slots, and room ahead (a cancelled job claimed ahead may have run over).
            room = self.concurrency + self._ahead.size - len(self._running) - len(self._ahead)
            free = 0 if self._quiet else max(0, room)
            # A wake-up from here on may be for work this cycle misses: look again.
            self._store_wait.signalled = False
            outcomes, self._outcomes = self._outcomes, []
            self._leases.sending(outcomes)
            sent = time.monotonic()  # the store starts the new leases no earlier
            try:
                turn: Awaitable[Claims] = backend.cycle(
                    outcomes, fetch_order(self.queue_specs), free, self.id, self.lease, now
                )
                if self._ahead:
                    # The turn goes out first, then the jobs claimed ahead run while
                    # it travels: that overlap is what prefetch is for.
                    turn = await launch(turn)
                    for claim, job in self._ahead.take(self.concurrency - len(self._running)):
                        self._begin(job, claim)
                claimed = await self._bounded(turn)
            except Exception as error:
                self._leases.unanswered(outcomes)
                self._outcomes = outcomes + self._outcomes
                assert self._halt is not None
                await pause(self._outage.failed(error), self._halt)
                continue
            self._outage.ok()
            self._leases.settle(outcomes, claimed.refused)
            self._cancel(claimed.cancel)
            # With a next turn worth sending at once (outcomes to hand in, or
            # queues that may hold more), the claims wait for it to be on its way,
            # so they run while it travels rather than before it leaves.
            overlap = (
                self._ahead.size > 0
                and len(self._running) < self.concurrency
                and (bool(self._outcomes) or len(claimed) >= free > 0)
            )
            for job in claimed:
                claim = self._running.claimed(job, sent)
                if not overlap and len(self._running) < self.concurrency:
                    self._begin(job, claim)
                else:
                    self._ahead.add(claim, job)
            if self.burst and not (claimed or self._running or self._outcomes or self._ahead):
                return
            # No second look when the claim was short of `free`: the queues were
            # drained, and a job that arrives since wakes the wait below.
            self._wake.clear()
            if not (overlap or self._outcomes or self._store_wait.signalled):
                await self._idle()
            # Jobs that finish in the same batchy round wake us one after another
            # in this loop iteration: let them all land, then settle them together.
            await asyncio.sleep(0)

    async def _bounded(self, call: Awaitable[T]) -> T:
        """A store call that gives up after one lease (``TimeoutError``: an outage).

        Past a lease the leases it would keep have run out anyway; and a store
        that stopped answering must not hold the worker, or its stop, for ever.
        """
        try:
            result = await within(call, self.lease, self._no_answer)
        except NoAnswer:
            # At a stop, the calls left are not worth a lease each (one deadline).
            self._silent = True
            raise
        except Exception as error:
            # Nor, after its hand-in, those that would find it gone again (a
            # PostgreSQL pool gives up on a server that refuses only after a while).
            self._unreached = self.queue.backend.unreachable(error)
            raise
        self._silent = self._unreached = False
        return result

    def _no_answer(self) -> str:
        backend = self.queue.backend
        text = f"{backend!r} did not answer within {self.lease:g}s (the worker's lease)"
        # A pool waiting on a server that refuses it never tells the call; the store may.
        reason = backend.connect_error()
        return text if reason is None else f"{text}; its last try to connect failed: {reason}"

    async def _idle(self) -> None:
        """Until a job finishes, the store has work, a periodic tick is due, or a poll."""
        assert self._wake is not None
        if not self._quiet and len(self._running) < self.concurrency:
            # Only with room for a job: a full worker must not take the wake-up
            # that its own cycle passes on to the others.
            self._store_wait.start()
        # The store's wait returns within poll_interval; twice that only guards
        # against a store that breaks its word.
        timeout = self.poll_interval * (1 if self._store_wait.task is None else 2)
        tick = self._ticks.next_at()
        if tick is not None:
            timeout = min(timeout, max(0.0, tick - _clock.now()))
        await pause(timeout, self._wake)

    def _begin(self, job: Claimed, claim: Claim) -> None:
        self._running.begin(job, claim)

    def _cancel(self, claims: Sequence[Claim]) -> None:
        """An operator cancelled ``claims``: stop those running here at their next await."""
        for claim in claims:
            waiting = self._ahead.pop(claim)
            if waiting is not None:  # claimed ahead: it ends as cancelled, never begun
                self._running.begin(waiting, claim, cancelled=True)
            else:
                self._running.cancel(claim)

    def _finished(self, outcome: Outcome | None) -> None:
        if outcome is not None:
            self.processed += 1
            self._outcomes.append(outcome)
        self._poke()

    async def _shutdown(self) -> None:
        if self._running:
            log.info("worker %s waiting for %d job(s)", self.id, len(self._running))
        unfinished = await self._running.wait(self.shutdown_timeout)
        released = self._ahead.hand_back(self._leases) + self._leases.release(unfinished)
        self._running.stop()
        if released:
            log.info("worker %s handing back %d unfinished job(s)", self.id, len(released))
        outcomes, self._outcomes = [*self._outcomes, *released], []
        if outcomes:
            if self._silent:  # its last turn went unanswered: no second lease to wait
                gave_up(self.id, outcomes, NoAnswer(self._no_answer()), self.lease)
            else:
                backend, leases = self.queue.backend, self._leases
                await hand_in_last(backend, self.id, outcomes, self.lease, leases, self._bounded)

    # -- leases and periodic jobs ----------------------------------------------------

    async def _beat(self) -> None:
        # Finished jobs whose outcome has not gone through a cycle yet are renewed
        # too: a slow or failing store round trip must not hand them to another worker.
        held = self._leases.held()
        info = WorkerInfo(
            self.id,
            socket.gethostname(),
            os.getpid(),
            tuple(n for n, _ in self.queue_specs),
            self.concurrency,
            tuple(job_id for job_id, _ in held),
            self.started_at,
        )
        sent = time.monotonic()
        # The worker record lives a little longer than one lease, like the leases.
        lost = await self._bounded(
            self.queue.backend.heartbeat(info, held, self.lease, _clock.now())
        )
        self._leases.renewed(held, lost, sent)
        for claim in held:
            if not self._leases.holds(claim):
                # Another worker runs it now: stop this run at its next await, so
                # it does not go on alongside the new holder's (or the key's next job).
                self._running.stop(claim)

    async def _heartbeat_loop(self) -> None:
        end = self._beats_end
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(end.wait(), self.heartbeat)
            if end.is_set():
                return
            try:
                await self._beat()
            except Exception as error:
                self._outage.failed(error, "heartbeat")
                self._leases.unrenewed()
            else:
                self._outage.ok("heartbeat")
                if self._flushing is None or self._flushing.done():
                    # A task of its own: a slow (or unanswered) write never makes the
                    # next beat late; unanswered, its counts are kept (Tally.flush).
                    flush = self._bounded(self._tally.flush(self.queue.backend))
                    self._flushing = ensure_quiet(flush)

    def stats(self) -> dict[str, Any]:
        """Jobs processed and running, for tests and dashboards."""
        return {
            "processed": self.processed,
            "running": len(self._running),
            "waiting": len(self._ahead),
        }
