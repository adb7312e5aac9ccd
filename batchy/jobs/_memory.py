"""The in-memory store, for tests and one-process scripts: plain dicts, one event loop.

Every method runs without awaiting, so each is atomic on its event loop: the
same guarantees as the SQLite and Redis stores, without durability. Times are
decided on :func:`_clock.store_now` (see :mod:`batchy.jobs._backend`). Idle
workers wait on in-process wake-ups (:class:`_wake.Wakeups`): every job put on a
queue's heap wakes one.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Sequence
from typing import Any

from . import _clock
from ._backend import DEAD_MAX, DEAD_MAX_AGE, Backend
from ._memory_jobs import DoneJob, dead_record, done_record, page, record_of, sort_key, state_of
from ._memory_jobs import MemJob as _Job
from ._model import (
    Claimed,
    Claims,
    DeadJob,
    Envelope,
    Info,
    JobStatus,
    KeyInfo,
    Outcome,
    QueueInfo,
    WorkerInfo,
)
from ._records import StoredJob
from ._wake import Wakeups

__all__ = ["MemoryBackend"]


class MemoryBackend(Backend):
    """Jobs in this process's memory; gone when it exits. ``Queue(MemoryBackend())``."""

    def __init__(self, *, dead_max: int = DEAD_MAX, dead_max_age: float = DEAD_MAX_AGE) -> None:
        self.dead_max = dead_max
        self.dead_max_age = dead_max_age
        self._jobs: dict[str, _Job] = {}
        # Per queue, a heap of (due, seq, id); stale entries are skipped on pop.
        self._ready: dict[str, list[tuple[float, int, str]]] = {}
        self._seq = itertools.count()
        self._woken: set[str] = set()  # queues to wake once the current operation ends
        self._claims = itertools.count(1)  # lease tokens: never reused in this store
        self._results: dict[str, DoneJob] = {}
        self._dead: dict[str, DeadJob] = {}
        self._uniques: dict[str, float] = {}
        self._workers: dict[str, tuple[WorkerInfo, float]] = {}
        self._leased: dict[str, _Job] = {}  # claimed jobs only, so recovery scans only them
        # Per ordering key with jobs, their ids in push order; only the head is ever
        # in a ready heap. A key's entry goes when its last job does.
        self._keys: dict[str, deque[str]] = {}
        self._wakeups = Wakeups(None)  # in-process only
        self._cancels: dict[str, tuple[str, str]] = {}  # id -> (worker, token) to cancel
        # Every queue that has or had jobs, for `info`: a queue whose jobs all wait
        # behind their keys' heads has no heap yet.
        self._queues: set[str] = set()

    def __repr__(self) -> str:
        return f"<MemoryBackend jobs={len(self._jobs)}>"

    def _put(self, job: _Job) -> None:
        job.seq = next(self._seq)
        heapq.heappush(self._ready.setdefault(job.queue, []), (job.due, job.seq, job.id))
        # Ready now, or a new due time a waiting worker must hear of: once the
        # operation ends (see _ring), once per queue, however many jobs it put.
        self._woken.add(job.queue)

    def _ring(self) -> None:
        woken, self._woken = self._woken, set()
        self._wakeups.signal(woken)

    async def push(
        self, envelopes: Sequence[Envelope], now: float, *, connection: Any = None
    ) -> list[bool]:
        self.no_connection(connection)
        self.check_envelopes(envelopes)
        sent, now = now, _clock.store_now()
        pushed = []
        for env in envelopes:
            if env.id in self._jobs:
                pushed.append(False)
                continue
            if env.unique is not None:
                if self._uniques.get(env.unique, 0.0) > now:
                    pushed.append(False)
                    continue
                self._uniques[env.unique] = now + env.unique_ttl
            due = _clock.on_store(env.due, sent, now)
            seq = next(self._seq)  # push order, kept by a job behind its key's head
            job = self._jobs[env.id] = _Job(env.id, env.queue, env.payload, due, seq, key=env.key)
            self._queues.add(env.queue)
            if env.key is not None:
                line = self._keys.setdefault(env.key, deque())
                line.append(env.id)
                if len(line) > 1:
                    pushed.append(True)
                    continue  # waits behind the key's head
            self._put(job)
            pushed.append(True)
        self._ring()
        return pushed

    def _leave(self, job: _Job | None) -> None:
        """``job`` left the store: if it held a key, the key's next job becomes its head."""
        if job is None or job.key is None:
            return
        line = self._keys.get(job.key)
        if line is None or job.id not in line:
            return
        head_left = line[0] == job.id
        line.remove(job.id)
        if not line:
            del self._keys[job.key]
        elif head_left:
            self._put(self._jobs[line[0]])

    async def cycle(
        self,
        outcomes: Sequence[Outcome],
        queues: Sequence[str],
        limit: int,
        worker: str,
        lease: float,
        now: float,
    ) -> Claims:
        sent, now = now, _clock.store_now()
        claimed = Claims()
        for outcome in self.screen_outcomes(outcomes):
            if not self._apply(outcome, sent, now):
                claimed.refused.append(outcome.id)
        for job in [j for j in self._leased.values() if j.lease < now]:
            del self._leased[job.id]
            job.owner = job.token = None  # its worker died or stalled: back to its queue
            self._put(job)
        # After the leases given back: a claim that ended there ends its cancel too.
        for job_id, (owner, token) in list(self._cancels.items()):
            if self._holds(job_id, token) is None:
                del self._cancels[job_id]  # the claim ended: the request goes with it
            elif owner == worker:
                claimed.cancel.append((job_id, token))
        for queue in queues:
            heap = self._ready.get(queue, [])
            while heap and len(claimed) < limit and heap[0][0] <= now:
                _, seq, job_id = heapq.heappop(heap)
                found = self._jobs.get(job_id)
                if found is None or found.seq != seq or found.owner is not None:
                    continue  # stale heap entry
                found.owner, found.lease, found.retrying = worker, now + lease, False
                found.token = str(next(self._claims))
                self._leased[found.id] = found
                claimed.append(Claimed(found.id, found.queue, found.payload, found.token))
        if len(claimed) >= limit:  # no room for all: the wake-up goes on to another worker
            self._woken.update(q for q in queues if (h := self._ready.get(q)) and h[0][0] <= now)
        self._ring()
        return claimed

    async def wait_for_work(self, worker: str, queues: Sequence[str], timeout: float) -> None:
        heads = [heap[0][0] for q in queues if (heap := self._ready.get(q))]
        # A lease running out gives its job back with no wake-up: wake for that too.
        heads += [job.lease for job in self._leased.values()]
        await self._wakeups.wait(queues, timeout, min(heads, default=None))

    def _holds(self, job_id: str, token: str) -> _Job | None:
        """The job if ``token`` is its current lease token (fencing), else None."""
        job = self._jobs.get(job_id)
        if job is None or job.token is None or job.token != token:
            return None
        return job

    def _apply(self, outcome: Outcome, sent: float, now: float) -> bool:
        """Apply ``outcome`` if its token holds; False (and nothing changes) if not."""
        job = self._holds(outcome.id, outcome.token)
        if job is None:
            return False
        self._leased.pop(outcome.id, None)
        job.owner = job.token = None
        if outcome.kind == "done":
            self._leave(self._jobs.pop(outcome.id, None))
            if outcome.keep > 0:
                self._results[outcome.id] = DoneJob(
                    outcome.result, now + outcome.keep, job.queue, job.key, job.payload
                )
        elif outcome.kind == "dead":
            self._leave(self._jobs.pop(outcome.id, None))
            # Without a queue or a payload of its own, it keeps the one it was claimed with.
            self._dead[outcome.id] = DeadJob(
                outcome.id,
                outcome.queue or job.queue,
                job.payload if outcome.payload is None else outcome.payload,
                outcome.reason,
                outcome.traceback,
                now,
                job.key,
            )
            self._cap_dead(now)
        else:
            if outcome.kind == "retry":
                job.payload, job.due, job.retrying = (
                    job.payload if outcome.payload is None else outcome.payload,
                    _clock.on_store(outcome.due, sent, now),
                    True,
                )
            self._put(job)
        return True

    def _cap_dead(self, now: float) -> None:
        by_age = sorted(self._dead.values(), key=lambda d: d.died_at, reverse=True)
        for i, dead in enumerate(by_age):
            if i >= self.dead_max or dead.died_at < now - self.dead_max_age:
                del self._dead[dead.id]

    async def heartbeat(
        self, worker: WorkerInfo, held: Sequence[tuple[str, str]], lease: float, now: float
    ) -> list[str]:
        now = _clock.store_now()
        lost = []
        for job_id, token in held:
            job = self._holds(job_id, token)
            if job is None:
                lost.append(job_id)
            else:
                job.lease = now + lease
        self._workers[worker.id] = (worker, now + lease)
        return lost

    async def save_progress(
        self, job_id: str, token: str, payload: str, lease: float, now: float
    ) -> bool:
        job = self._holds(job_id, token)
        if job is None:
            return False
        job.payload, job.lease = payload, _clock.store_now() + lease
        return True

    async def keys(self, now: float, limit: int = 10) -> tuple[list[KeyInfo], list[KeyInfo]]:
        shift = now - _clock.store_now()  # store times are reported on the caller's clock
        found = []
        for key, line in self._keys.items():
            h = self._jobs[line[0]]
            found.append(
                KeyInfo.of_head(
                    key,
                    h.queue,
                    len(line),
                    h.id,
                    running=h.owner is not None,
                    lease=h.lease + shift,
                    due=h.due + shift,
                    retrying=h.retrying,
                    now=now,
                )
            )
        return self.rank_keys(found, limit)

    async def forget_worker(self, worker_id: str) -> None:
        self._workers.pop(worker_id, None)

    async def status(self, job_id: str, now: float) -> JobStatus:
        return (await self.statuses([job_id], now))[0]

    async def statuses(self, job_ids: Sequence[str], now: float) -> list[JobStatus]:
        now = _clock.store_now()
        return [self._status(job_id, now) for job_id in job_ids]

    def _status(self, job_id: str, now: float) -> JobStatus:
        job = self._jobs.get(job_id)
        if job is not None:
            if job.owner is not None:
                return JobStatus(job_id, "running")
            if job.due > now:
                return JobStatus(job_id, "retrying" if job.retrying else "scheduled")
            return JobStatus(job_id, "queued")
        if job_id in self._dead:
            return JobStatus(job_id, "dead", reason=self._dead[job_id].reason)
        kept = self._results.get(job_id)
        if kept is not None and kept.expires >= now:
            return JobStatus(job_id, "done", result=kept.result)
        return JobStatus(job_id, "unknown")

    async def info(self, now: float) -> Info:
        now = _clock.store_now()
        queues = []
        for name in sorted(self._queues):
            # Jobs waiting behind their key's head are not claimable: not counted here
            # (as in the other stores); `keys()` shows them.
            jobs = [
                j
                for j in self._jobs.values()
                if j.queue == name and (j.key is None or self._keys[j.key][0] == j.id)
            ]
            ready = [j.due for j in jobs if j.owner is None and j.due <= now]
            waiting = [j for j in jobs if j.owner is None and j.due > now]
            queues.append(
                QueueInfo(
                    name,
                    len(ready),
                    max(0.0, now - min(ready)) if ready else 0.0,
                    sum(1 for j in jobs if j.owner is not None),
                    sum(1 for j in waiting if not j.retrying),
                    sum(1 for j in waiting if j.retrying),
                )
            )
        workers = self.with_running(
            (w for w, expires in self._workers.values() if expires >= now),
            ((j.owner or "", j.id) for j in self._leased.values()),
        )
        return Info(tuple(queues), len(self._dead), workers)

    async def dead_jobs(self, limit: int = 100) -> list[DeadJob]:
        return sorted(self._dead.values(), key=lambda d: d.died_at, reverse=True)[:limit]

    async def retry_dead(self, ids: Sequence[str] | None, now: float) -> int:
        # A dead job whose id is a live job's again (enqueued anew) stays dead.
        chosen = [
            i
            for i in (self._dead if ids is None else ids)
            if i in self._dead and i not in self._jobs
        ]
        for job_id in chosen:
            dead = self._dead.pop(job_id)
            await self.push([Envelope(dead.id, dead.queue, dead.payload, key=dead.key)], now)
        return len(chosen)

    async def delete_dead(self, ids: Sequence[str] | None) -> int:
        chosen = [i for i in (self._dead if ids is None else ids) if i in self._dead]
        for job_id in chosen:
            del self._dead[job_id]
        return len(chosen)

    # -- operating -------------------------------------------------------------------

    def describe(self) -> str:
        return "memory (this process only)"

    async def list_jobs(
        self,
        state: str,
        now: float,
        *,
        queue: str | None = None,
        key: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> tuple[list[StoredJob], str | None]:
        store_now = _clock.store_now()
        shift = now - store_now  # store times are reported on the caller's clock
        found: list[tuple[tuple[Any, ...], StoredJob]]
        if state == "dead":
            found = [
                ((d.died_at, d.id), dead_record(d, shift))
                for d in self._dead.values()
                if (queue is None or d.queue == queue) and (key is None or d.key == key)
            ]
        elif state == "done":
            found = [
                ((d.expires, i), done_record(i, d, shift))
                for i, d in self._results.items()
                if d.expires >= store_now
                and (queue is None or d.queue == queue)
                and (key is None or d.key == key)
            ]
        else:
            line = self._keys.get(key, ()) if key is not None else None
            jobs = self._jobs.values() if line is None else [self._jobs[i] for i in line]
            found = [
                (sort_key(state, j) if key is None else (j.seq,), record_of(j, state, shift))
                for j in jobs
                if state_of(j, self._keys, store_now) == state
                and (queue is None or j.queue == queue)
            ]
        # With a key, waiting and running jobs come in the key's push order; dead
        # and done ones keep their own order (by time).
        by_key = key is not None and state not in ("dead", "done")
        return page(f"{state}@key" if by_key else state, found, after, limit, self)

    async def jobs(self, job_ids: Sequence[str], now: float) -> list[StoredJob | None]:
        store_now = _clock.store_now()
        return [self._record(job_id, store_now, now - store_now) for job_id in job_ids]

    def _record(self, job_id: str, store_now: float, shift: float) -> StoredJob | None:
        found = self._jobs.get(job_id)
        if found is not None:
            return record_of(found, state_of(found, self._keys, store_now), shift)
        if job_id in self._dead:
            return dead_record(self._dead[job_id], shift)
        kept = self._results.get(job_id)
        if kept is not None and kept.expires >= store_now:
            return done_record(job_id, kept, shift)
        return None

    async def act(self, action: str, ids: Sequence[str], now: float) -> dict[str, str]:
        store_now = _clock.store_now()
        states = {i: state_of(j, self._keys, store_now) for i in ids if (j := self._jobs.get(i))}
        kept = {i for i in ids if (r := self._results.get(i)) and r.expires >= store_now}
        refused = self.refusals(states, action, ids, self._dead.keys(), kept)
        if refused:
            return refused
        if action == "retry_dead":
            await self.retry_dead(ids, now)
        elif action == "delete_dead":
            await self.delete_dead(ids)
        for job_id in ids if action in ("delete", "run_now", "cancel") else ():
            job = self._jobs[job_id]
            if action == "cancel":
                self._cancels[job_id] = (job.owner or "", job.token or "")
            elif action == "run_now":
                job.due = store_now
                self._put(job)  # a new heap entry; the old one is stale now
            else:
                self._leave(self._jobs.pop(job_id))
        self._ring()
        return {}
