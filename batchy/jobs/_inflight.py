"""The jobs a worker is running: one batchy task per run, stopped on request, its outcome kept.

Each run is a batchy task (:func:`~batchy.jobs._runner.run_job`), not an asyncio
one: it waits on its handler without a bridge between the two loops of control,
and its end is seen in the step that ends it, with no trip through the event
loop. That is most of what a short job costs a worker.

A run stops at its next await when an operator cancels it (it ends cancelled,
in the dead set), when its lease is lost (another worker holds the job now), or
when the worker stops; :meth:`InFlight.finished` turns how it ended into the
outcome the worker hands to its store, or into none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import batchy

from ._activity import Tally
from ._guard import JobScope
from ._hooks import JobHook, log
from ._leases import Claim, Leases
from ._model import Claimed, Outcome
from ._runner import run_job

if TYPE_CHECKING:
    from ._queue import Queue

__all__ = ["InFlight"]


class InFlight:
    """The runs of one worker, by claim.

    ``done(outcome)`` is called as a run ends on its own: with the outcome to send,
    or ``None`` when there is none to send (its lease was lost); a slot is free.
    """

    def __init__(
        self,
        queue: Queue,
        hooks: list[JobHook],
        tally: Tally,
        worker: str,
        leases: Leases,
        done: Callable[[Outcome | None], None],
    ) -> None:
        self.queue = queue
        self.hooks = hooks
        self.tally = tally  # one of the hooks (see run_job)
        self.worker = worker
        self.leases = leases
        # Asked twice per run (see JobScope): the leases' method itself, no call between.
        self.fresh = leases.fresh
        self.done = done
        self._runs: dict[Claim, batchy.Task[Outcome | None]] = {}
        # Claims an operator cancelled: their runs end as cancelled, never retried.
        self._cancelled: set[Claim] = set()
        # Runs this worker stopped (shutdown, kill, a lost lease): their
        # CancelledError is a release, where a handler's own cancel is a failure.
        self._stopped: set[Claim] = set()
        self._empty: asyncio.Event | None = None  # set as the last run ends
        # Every run's end calls this one bound method (its claim is its scope's):
        # no callable is made per run.
        self._on_end = cast("Callable[[batchy.Future[Outcome | None]], None]", self.finished)

    def __len__(self) -> int:
        return len(self._runs)

    def claimed(self, job: Claimed, sent: float) -> Claim:
        """Hold the lease of ``job``, claimed by a cycle sent at ``sent`` (monotonic).

        A claim of the same job this worker still held has ended (see
        :meth:`Leases.add`): its run, if it has one, stops.
        """
        earlier = self.leases.claim_of(job.id)
        claim = self.leases.add(job, sent)
        if earlier is not None:
            self.stop(earlier)
        return claim

    def begin(self, job: Claimed, claim: Claim, cancelled: bool = False) -> None:
        """Run ``job``; ``cancelled``: an operator cancelled it before it began."""
        leases = self.leases
        # Paused between the claim and now, the lease may have moved on: such a
        # run is not begun (it would overlap the new holder's).
        if not leases.fresh(claim):
            leases.drop(claim)
            return
        if cancelled:
            self._cancelled.add(claim)
        # Its lease is checked again at the run's first step: a pause may fall in between.
        scope = JobScope(f"job {job.id}", claim, self)
        run = run_job(self.queue, job, self.hooks, self.tally, self.worker, leases.lease, scope)
        task = batchy.Task(run, run_job, True).start(scope)
        self._runs[claim] = task
        task.add_done_callback(self._on_end)

    # What each run's scope asks (see JobScope); fresh() is the leases' own (__init__).

    def cancel_requested(self, claim: Claim) -> bool:
        return claim in self._cancelled

    def stop_requested(self, claim: Claim) -> bool:
        return claim in self._stopped

    def cancel(self, claim: Claim) -> None:
        """An operator cancelled ``claim``: its run stops at its next await, as cancelled."""
        task = self._runs.get(claim)
        # (A run that ended left _runs in the step that ended it.)
        if task is not None and claim not in self._cancelled:
            log.info("worker %s: cancelling job %s (asked by an operator)", self.worker, claim[0])
            self._cancelled.add(claim)
            task.cancel()

    def stop(self, claim: Claim | None = None) -> None:
        """Stop the run of ``claim`` (its lease was lost), or every run (the worker stops).

        Once: a run told to stop is left to its cleanup, which a second
        ``CancelledError`` would cut short.
        """
        for key in list(self._runs) if claim is None else [claim]:
            task = self._runs.get(key)
            if task is not None and key not in self._stopped:
                self._stopped.add(key)
                task.cancel()

    async def wait(self, timeout: float) -> list[Claim]:
        """Wait up to ``timeout`` seconds for every run to end; the claims still running."""
        if self._runs:
            self._empty = asyncio.Event()
            # asyncio.wait, not wait_for: on 3.11 wait_for returns normally when
            # it is cancelled just as the event is set, and a kill would be lost.
            ended = asyncio.ensure_future(self._empty.wait())
            try:
                await asyncio.wait([ended], timeout=timeout)
            finally:
                ended.cancel()
        return list(self._runs)

    def finished(self, task: batchy.Task[Outcome | None]) -> None:
        """A run ended (called by its task, as it ends)."""
        scope: JobScope = task.scope  # type: ignore[assignment]  # as begin() made it
        claim = scope.claim
        self._runs.pop(claim, None)
        self._cancelled.discard(claim)
        self._stopped.discard(claim)
        if not self._runs and self._empty is not None:
            self._empty.set()
        try:
            outcome = task.result()
        except asyncio.CancelledError:  # stopped: the worker stops
            self.leases.drop(claim)
            return
        except BaseException as error:  # run_job never raises: a bug; the lease brings it back
            self.leases.drop(claim)
            log.error("worker %s: job %s crashed the runner", self.worker, claim[0], exc_info=error)
            return
        # The runner's outcomes are valid by construction (a bad retry delay is
        # dead already); stores screen what reaches them from elsewhere.
        self.done(self.leases.finished(claim, outcome))
