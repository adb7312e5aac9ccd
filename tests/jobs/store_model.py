"""The reference model of the store contract (:mod:`batchy.jobs._backend`): plain dicts, no I/O.

``test_store_model`` drives a real store and this model through the same steps
and compares what each says. The model keeps the contract's rules only, each in
the most direct form: a job is in exactly one place (the jobs, by id), a key's
line is its jobs in push order and only its head may be claimed, a token holds
until its claim ends (an outcome, or the cycle that gives an expired lease
back), and every time is the store's clock, which the test moves (``t``).

Where the contract leaves a choice to the store (which of several ready jobs of
a queue a claim takes), the model checks that the store's choice is one the
contract allows and then follows it. Which action applies to which state is
the contract's own table (:meth:`Backend.refusals`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from batchy.jobs import Backend, Outcome

__all__ = ["Dead", "Done", "Job", "Model"]


@dataclass
class Job:
    """A job still in the store: waiting, blocked behind its key's head, or claimed."""

    id: str
    queue: str
    payload: str
    key: str | None
    due: float
    seq: int  # push order
    retrying: bool = False
    token: str | None = None  # the current claim's lease token; None when not claimed
    worker: str | None = None
    lease: float = 0.0
    # Ready at its push (no due time, not behind a head) and never claimed since:
    # such jobs of one queue are claimed in push order on every store.
    fresh: bool = False


@dataclass(frozen=True)
class Dead:
    """A dead set entry."""

    queue: str
    payload: str
    reason: str
    key: str | None


@dataclass(frozen=True)
class Done:
    """A done job's kept result, and the queue and key it had."""

    result: str | None
    queue: str
    key: str | None


class Model:
    """What every store must hold after the same steps, at store time ``t``."""

    def __init__(self, t: float) -> None:
        self.t = t
        self.jobs: dict[str, Job] = {}
        self.lines: dict[str, list[str]] = {}  # per ordering key with jobs, their ids in push order
        self.results: dict[str, Done] = {}  # kept results (never expire in a run)
        self.dead: dict[str, Dead] = {}
        self.uniques: set[str] = set()  # unique keys taken (never expire in a run)
        self.queues: set[str] = set()  # every queue that has or had jobs
        self.cancels: dict[str, tuple[str, str]] = {}  # id -> (worker, token) of its claim
        self.tokens: dict[str, set[str]] = {}  # every token each job was claimed under
        self._seq = itertools.count()

    # -- states ------------------------------------------------------------------------

    def head(self, job: Job) -> bool:
        return job.key is None or self.lines[job.key][0] == job.id

    def state(self, job: Job) -> str:
        """The job's state as an operator's listing names it."""
        if job.token is not None:
            return "running"
        if not self.head(job):
            return "blocked"
        if job.due > self.t:
            return "retrying" if job.retrying else "scheduled"
        return "queued"

    def state_of(self, job_id: str) -> str | None:
        """The state of the job an action on ``job_id`` means, None if the store has none."""
        job = self.jobs.get(job_id)
        if job is not None:
            return self.state(job)
        return "dead" if job_id in self.dead else "done" if job_id in self.results else None

    def status(self, job_id: str) -> tuple[str, str | None, str]:
        """``(state, result, reason)`` as :meth:`Backend.status` must say it: a job
        behind its key's head is ``queued`` or ``scheduled`` by its due time."""
        job = self.jobs.get(job_id)
        if job is not None:
            state = self.state(job)
            if state == "blocked":
                state = "scheduled" if job.due > self.t else "queued"
            return state, None, ""
        if job_id in self.dead:
            return "dead", None, self.dead[job_id].reason
        if job_id in self.results:
            return "done", self.results[job_id].result, ""
        return "unknown", None, ""

    def ready(self, queue: str) -> list[Job]:
        """The jobs a claim may take from ``queue`` now."""
        return [j for j in self.jobs.values() if j.queue == queue and self.state(j) == "queued"]

    def listed(self, state: str, queue: str | None = None, key: str | None = None) -> list[str]:
        """The ids :meth:`Backend.list_jobs` must list in ``state``, of ``queue`` and
        ``key`` if given; in push order for the jobs still in the store."""
        found: dict[str, Job | Dead | Done] = (
            dict(self.dead)
            if state == "dead"
            else dict(self.results)
            if state == "done"
            else {i: j for i, j in self.jobs.items() if self.state(j) == state}
        )
        return [
            i
            for i, j in sorted(found.items(), key=lambda ij: getattr(ij[1], "seq", 0))
            if (queue is None or j.queue == queue) and (key is None or j.key == key)
        ]

    def counts(self, queue: str) -> tuple[int, int, int, int]:
        """``(size, running, scheduled, retrying)`` of ``queue`` as ``info`` counts them."""
        states = [self.state(j) for j in self.jobs.values() if j.queue == queue]
        return (
            states.count("queued"),
            states.count("running"),
            states.count("scheduled"),
            states.count("retrying"),
        )

    def keys(self) -> set[tuple[str, str, int, str, str]]:
        """``(key, queue, jobs, head, state)`` of each key with jobs, as ``keys`` says it:
        the head's state, ``expired`` for a lease run out and not given back yet."""
        found = set()
        for key, line in self.lines.items():
            head = self.jobs[line[0]]
            if head.token is not None:
                state = "expired" if head.lease < self.t else "running"
            elif head.due > self.t:
                state = "retrying" if head.retrying else "scheduled"
            else:
                state = "queued"
            found.add((key, head.queue, len(line), head.id, state))
        return found

    def holds(self, job_id: str, token: str) -> Job | None:
        job = self.jobs.get(job_id)
        return job if job is not None and job.token == token else None

    # -- steps -------------------------------------------------------------------------

    def push(
        self, envelopes: list[tuple[str, str, str, float | None, str | None, str | None]]
    ) -> list[bool]:
        """``(id, queue, payload, delay, unique, key)`` each; which were stored. A
        skipped envelope (its id a live job's, its unique key taken) changes nothing."""
        pushed = []
        for job_id, queue, payload, delay, unique, key in envelopes:
            if job_id in self.jobs or (unique is not None and unique in self.uniques):
                pushed.append(False)
                continue
            if unique is not None:
                self.uniques.add(unique)
            self.add(job_id, queue, payload, key, self.t + (delay or 0.0), fresh=delay is None)
            pushed.append(True)
        return pushed

    def add(self, job_id: str, queue: str, payload: str, key: str | None, due: float, *,
            fresh: bool) -> None:  # fmt: skip
        job = self.jobs[job_id] = Job(job_id, queue, payload, key, due, next(self._seq))
        self.queues.add(queue)
        if key is not None:
            self.lines.setdefault(key, []).append(job_id)
        job.fresh = fresh and self.head(job)

    def _leave(self, job_id: str) -> Job:
        job = self.jobs.pop(job_id)
        if job.key is not None:
            line = self.lines[job.key]
            line.remove(job_id)
            if not line:
                del self.lines[job.key]
        return job

    def apply(self, outcome: Outcome) -> bool:
        """Apply ``outcome`` if its token holds; whether it did."""
        job = self.holds(outcome.id, outcome.token)
        if job is None:
            return False
        job.token = job.worker = None
        if outcome.kind == "done":
            self._leave(job.id)
            if outcome.keep > 0:
                self.results[job.id] = Done(outcome.result, job.queue, job.key)
        elif outcome.kind == "dead":
            self._leave(job.id)
            # Without a payload of its own, it keeps the one it was claimed with.
            payload = job.payload if outcome.payload is None else outcome.payload
            # Without a queue (''), it keeps the one it was claimed from.
            queue = outcome.queue or job.queue
            self.dead[job.id] = Dead(queue, payload, outcome.reason, job.key)
        elif outcome.kind == "retry":
            payload = job.payload if outcome.payload is None else outcome.payload
            job.payload, job.due, job.retrying = payload, outcome.due, True
        return True

    def give_back(self) -> None:
        """What a cycle does before it claims: expired leases end, their tokens with them."""
        for job in self.jobs.values():
            if job.token is not None and job.lease < self.t:
                job.token = job.worker = None

    def claim(self, job_id: str, token: str, worker: str, lease: float) -> None:
        job = self.jobs[job_id]
        job.token, job.worker, job.lease = token, worker, self.t + lease
        job.retrying = job.fresh = False
        self.tokens.setdefault(job_id, set()).add(token)

    def cancels_for(self, worker: str) -> set[tuple[str, str]]:
        """The claims of ``worker`` an operator cancelled that still hold."""
        return {
            (i, tok) for i, (w, tok) in self.cancels.items() if w == worker and self.holds(i, tok)
        }

    def heartbeat(self, held: list[tuple[str, str]], lease: float) -> list[str]:
        lost = []
        for job_id, token in held:
            job = self.holds(job_id, token)
            if job is None:
                lost.append(job_id)
            else:
                job.lease = self.t + lease
        return lost

    def save_progress(self, job_id: str, token: str, payload: str, lease: float) -> bool:
        job = self.holds(job_id, token)
        if job is None:
            return False
        job.payload, job.lease = payload, self.t + lease
        return True

    def retry_dead(self, ids: list[str] | None) -> int:
        """Dead jobs back at the end of their queue (and key); one whose id is live stays."""
        chosen = [i for i in (list(self.dead) if ids is None else ids)
                  if i in self.dead and i not in self.jobs]  # fmt: skip
        for job_id in chosen:
            dead = self.dead.pop(job_id)
            self.add(job_id, dead.queue, dead.payload, dead.key, self.t, fresh=False)
        return len(chosen)

    def delete_dead(self, ids: list[str] | None) -> int:
        chosen = [i for i in (list(self.dead) if ids is None else ids) if i in self.dead]
        for job_id in chosen:
            del self.dead[job_id]
        return len(chosen)

    def act(self, action: str, ids: list[str]) -> dict[str, str]:
        states = {i: self.state(self.jobs[i]) for i in ids if i in self.jobs}
        refused = Backend.refusals(states, action, ids, self.dead.keys(), self.results.keys())
        if refused:
            return refused
        if action == "retry_dead":
            self.retry_dead(ids)
        elif action == "delete_dead":
            self.delete_dead(ids)
        for job_id in ids if action in ("delete", "run_now", "cancel") else ():
            job = self.jobs[job_id]
            if action == "delete":
                self._leave(job_id)
            elif action == "run_now":
                job.due = self.t
            else:
                self.cancels[job_id] = (job.worker or "", job.token or "")
        return {}
