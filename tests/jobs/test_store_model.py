"""Every store against one model of the contract: a stateful (model-based) test.

Hypothesis drives a store through the calls a worker, a client and an operator
make: ``push`` (with and without ordering key, delay, unique key, an id still in
the store, a caller whose clock is off), the worker's ``cycle`` (done with and
without a kept result, retry after a backoff, dead with and without a payload,
release; claims with limits and queue orders), ``heartbeat``, ``save_progress``,
some of these for a claim that ended (its lease ran out and the job moved on),
also beside the job's live claim in one call, the dead set, ``act``, and
the store's clock moving on. After every step it compares all the store says
with :class:`store_model.Model`: every job's status (its result, whose payloads
and results are each unique, so a job never shows another's) and record, every
state's listing page by page (each job in exactly one state), the counts per
queue, the ordering keys, the dead set. Each claim is checked as it comes: only
a ready job (due, not leased, its key's head), as many as the queues in order
allow, jobs ready since their push oldest first, under a token the job never had.

The store's clock stands still and the test moves it, on every store (see
:mod:`frozen_stores`). Steps are 0.37 s past whole seconds and every lease,
delay and backoff is whole seconds, so no deadline falls on a moment the test
looks at: no store's choice of ``<`` or ``<=`` is put to the test.

What the machine leaves out, and why: a unique key or kept result expiring
(Redis expires them on its own real-time clock, which no script reads: they are
kept longer than any run, and example tests wait for them); workers in ``info``
(the same); a queue's latency (Redis reports the age of the job at the head of
its list, not of the oldest); several dead jobs of one ordering key retried in
one call (the contract leaves their order in the key to the store).

``pytest --chaos-long`` runs twenty times as many examples.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from batchy.jobs import Backend, Claimed, Envelope, Outcome, WorkerInfo
from batchy.jobs._records import LIST_STATES

from .frozen_stores import OPEN, Frozen, freeze
from .store_model import Model

pytestmark = pytest.mark.timeout(900)  # (--chaos-long)

T = TypeVar("T")

START = 1_700_000_000.0
STEPS = (0.37, 2.37, 6.37, 21.37)  # clock moves: never a whole number of seconds apart
DELAYS = (None, 3.0, None, -1.0, 10.0)  # of a push: mostly none; -1 is due already
BACKOFFS = (0.0, 2.0, 8.0)
LEASES = (4.0, 20.0)
SKEWS = (0.0, 7.0, -7.0)  # the caller's clock off by this much: changes nothing
KEEP = 30 * 86400.0  # results and unique keys outlive any run (see the docstring)
WORKERS = ("w1", "w2")
QUEUES = ("a", "b")
KEYS = ("k1", "k2")
UNIQUES = ("u1", "u2")


# -- the machine ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    id: str
    queue: str
    token: str
    worker: str


class StoreMachine(RuleBasedStateMachine):
    """One store and the model, driven alike; set ``runner``, ``open`` and ``place``."""

    runner: asyncio.Runner
    open: Callable[[Any], Awaitable[Frozen]]
    place: Any

    def __init__(self) -> None:
        super().__init__()
        self.model = Model(START)
        self.frozen = self.call(self.open(self.place))
        self.store = self.frozen.store
        self.call(self.frozen.set_clock(START))
        self.names = itertools.count()
        self.known: list[str] = []  # every id pushed, in first-push order
        self.claims: list[Claim] = []  # every claim ever made, live or not

    def call(self, coro: Awaitable[T]) -> T:
        return self.runner.run(coro)  # type: ignore[arg-type]

    def teardown(self) -> None:
        self.call(self.frozen.close())

    def fresh(self, what: str) -> str:
        return f"{what}{next(self.names)}"

    # -- steps ---------------------------------------------------------------------------

    @initialize(data=st.data())
    def some_jobs(self, data: st.DataObject) -> None:
        self.push_some(data, 4, 10)

    @rule(data=st.data())
    def push(self, data: st.DataObject) -> None:
        self.push_some(data, 1, 3)

    def push_some(self, data: st.DataObject, least: int, most: int) -> None:
        now = self.model.t + data.draw(st.sampled_from(SKEWS), "skew")
        envelopes, plain = [], []
        for _ in range(data.draw(st.integers(least, most), "envelopes")):
            again = bool(self.known) and data.draw(st.booleans(), "known id")
            job_id = data.draw(st.sampled_from(self.known), "id") if again else self.fresh("j")
            if job_id not in self.known:
                self.known.append(job_id)
            queue = data.draw(st.sampled_from(QUEUES), "queue")
            delay = data.draw(st.sampled_from(DELAYS), "delay")
            unique = data.draw(st.sampled_from((None, *UNIQUES)), "unique")
            key = data.draw(st.sampled_from((None, *KEYS)), "key")
            payload = self.fresh("p")
            due = None if delay is None else now + delay
            ttl = KEEP if unique is not None else 0.0
            envelopes.append(Envelope(job_id, queue, payload, due, unique, ttl, key))
            plain.append((job_id, queue, payload, delay, unique, key))
        pushed = self.call(self.store.push(envelopes, now))
        assert pushed == self.model.push(plain), envelopes

    @rule(data=st.data())
    def turn(self, data: st.DataObject) -> None:
        """A worker's turn: a rule twice, as turns are what happens most."""
        self.cycle(data)

    @rule(data=st.data())
    def cycle(self, data: st.DataObject) -> None:
        worker = data.draw(st.sampled_from(WORKERS), "worker")
        now = self.model.t + data.draw(st.sampled_from(SKEWS), "skew")
        picked = self.held(data, worker, "outcomes")
        outcomes, modelled = [], []
        for claim in picked:
            outcome, backoff = self.outcome(data, claim, now)
            outcomes.append(outcome)
            # The model's clock is the store's: a retry is due `backoff` after t.
            modelled.append(replace(outcome, due=self.model.t + backoff))
        count = data.draw(st.integers(1, len(QUEUES)), "queues")
        queues = list(data.draw(st.permutations(QUEUES), "order")[:count])
        limit = data.draw(st.sampled_from((1, 2, 3, 0)), "limit")  # 0: no free slot
        lease = data.draw(st.sampled_from(LEASES), "lease")
        claims = self.call(self.store.cycle(outcomes, queues, limit, worker, lease, now))
        refused = [o.id for o in modelled if not self.model.apply(o)]
        assert sorted(claims.refused) == sorted(refused), outcomes
        self.model.give_back()
        self.check_claims(list(claims), queues, limit)
        for c in claims:
            self.model.claim(c.id, c.token, worker, lease)
            self.claims.append(Claim(c.id, c.queue, c.token, worker))
        assert set(claims.cancel) == self.model.cancels_for(worker)

    def held(self, data: st.DataObject, worker: str, label: str) -> list[Claim]:
        """Claims ``worker`` speaks for: some of those it holds, and maybe one that
        ended (its lease ran out and the job moved on, or it reported), anywhere
        among them: it may be of a job whose live claim is there too."""
        live = [c for c in self.claims if c.worker == worker and self.model.holds(c.id, c.token)]
        some = st.lists(st.sampled_from(live), max_size=3, unique=True)
        picked: list[Claim] = data.draw(some, label) if live else []
        ended = [c for c in self.claims
                 if c.worker == worker and not self.model.holds(c.id, c.token)]  # fmt: skip
        if ended and data.draw(st.booleans(), f"{label}: one that ended"):
            at = data.draw(st.integers(0, len(picked)), f"{label}: where")
            picked.insert(at, data.draw(st.sampled_from(ended), f"{label}: ended"))
        return picked

    def outcome(self, data: st.DataObject, claim: Claim, now: float) -> tuple[Outcome, float]:
        kind = data.draw(st.sampled_from(("done", "retry", "dead", "release")), "kind")
        if kind == "done":
            keep = data.draw(st.sampled_from((KEEP, 0.0)), "keep")
            result = data.draw(st.sampled_from((self.fresh("r"), None)), "result")
            return Outcome(
                claim.id, "done", claim.queue, result=result, keep=keep, token=claim.token
            ), 0.0
        if kind == "retry":
            backoff = data.draw(st.sampled_from(BACKOFFS), "backoff")
            payload = self.fresh("p")
            return Outcome(
                claim.id, "retry", claim.queue, payload, now + backoff, token=claim.token
            ), backoff
        if kind == "dead":
            reason = self.fresh("why")
            payload = data.draw(st.sampled_from((self.fresh("p"), None)), "payload")
            queue = data.draw(st.sampled_from((claim.queue, "")), "queue")
            return Outcome(
                claim.id,
                "dead",
                queue,
                payload,
                reason=reason,
                traceback="tb",
                token=claim.token,
            ), 0.0
        return Outcome(claim.id, "release", token=claim.token), 0.0

    def check_claims(self, claims: list[Claimed], queues: list[str], limit: int) -> None:
        """The store's claims are ones the contract allows, before the model takes them."""
        model = self.model
        assert len({c.id for c in claims}) == len(claims), claims
        for c in claims:
            job = model.jobs.get(c.id)
            assert c.queue in queues and job is not None, c
            # Ready: due, not leased (a live lease is never claimed twice), its key's head.
            assert model.state(job) == "queued", (c, model.state(job), job)
            assert (c.queue, c.payload) == (job.queue, job.payload), (c, job)
            assert c.token not in model.tokens.get(c.id, ()), c  # a fresh token per claim
        left = limit
        for queue in queues:  # the first queue is drained first
            ready = model.ready(queue)
            taken = {c.id for c in claims if c.queue == queue}
            assert len(taken) == min(left, len(ready)), (queue, claims, ready)
            left -= len(taken)
            # Jobs ready since their push and never claimed go oldest first.
            fresh = [j for j in ready if j.fresh]
            last = max((j.seq for j in fresh if j.id in taken), default=-1)
            assert all(j.seq > last for j in fresh if j.id not in taken), (queue, claims, fresh)

    def heartbeat(self, data: st.DataObject) -> None:
        worker = data.draw(st.sampled_from(WORKERS), "worker")
        held = self.held(data, worker, "held")
        lease = data.draw(st.sampled_from(LEASES), "lease")
        info = WorkerInfo(worker, "host", 1, QUEUES, 3)
        pairs = [(c.id, c.token) for c in held]
        lost = self.call(self.store.heartbeat(info, pairs, lease, self.model.t))
        assert sorted(lost) == sorted(self.model.heartbeat(pairs, lease)), held

    @rule(step=st.sampled_from(STEPS))
    def wait(self, step: float) -> None:
        self.model.t += step
        self.call(self.frozen.set_clock(self.model.t))

    @rule(data=st.data())
    def operate(self, data: st.DataObject) -> None:
        """The rarer calls, one rule for all, so that the others make most steps."""
        rarer = ("heartbeat", "retry_dead", "delete_dead", "save_progress")
        step = data.draw(st.sampled_from(rarer))
        getattr(self, step)(data)

    @rule(data=st.data())
    def act(self, data: st.DataObject) -> None:
        action = data.draw(st.sampled_from(sorted(Backend.actions)), "action")
        at_most = 1 if action == "retry_dead" else 2  # (see the docstring)
        # Mostly jobs the action applies to, else any (to be refused); or a key's
        # first two jobs, whose order an action on both may upset.
        states = Backend.actions[action]
        fit = [i for i in self.known if self.model.state_of(i) in states]
        lines = [line[:2] for line in self.model.lines.values() if len(line) > 1]
        if at_most > 1 and lines and data.draw(st.booleans(), "a key's first jobs"):
            ids = data.draw(st.sampled_from(lines), "ids")
        else:
            if not (fit and data.draw(st.booleans(), "a job it applies to")):
                fit = [*self.known, "nobody"]
            pool = st.sampled_from(fit)
            ids = data.draw(st.lists(pool, min_size=1, max_size=at_most, unique=True), "ids")
        refused = self.call(self.store.act(action, ids, self.model.t))
        assert refused == self.model.act(action, ids), (action, ids)

    def retry_dead(self, data: st.DataObject) -> None:
        ids = self.some_ids(data, at_most=1)
        keys = [d.key for d in self.model.dead.values() if d.key is not None]
        if ids is None and len(keys) != len(set(keys)):
            ids = []  # (see the docstring: their order in the key is the store's)
        moved = self.call(self.store.retry_dead(ids, self.model.t))
        assert moved == self.model.retry_dead(ids), ids

    def delete_dead(self, data: st.DataObject) -> None:
        ids = self.some_ids(data, at_most=2)
        assert self.call(self.store.delete_dead(ids)) == self.model.delete_dead(ids), ids

    def some_ids(self, data: st.DataObject, at_most: int) -> list[str] | None:
        """Ids of the dead set and beyond, or None (all)."""
        pool = [*self.model.dead, *self.known, "nobody"]
        if data.draw(st.booleans(), "all"):
            return None
        return data.draw(st.lists(st.sampled_from(pool), max_size=at_most, unique=True), "ids")

    def save_progress(self, data: st.DataObject) -> None:
        if not self.claims:
            return
        claim = data.draw(st.sampled_from(self.claims), "claim")
        lease = data.draw(st.sampled_from(LEASES), "lease")
        payload = self.fresh("p")
        saved = self.call(
            self.store.save_progress(claim.id, claim.token, payload, lease, self.model.t)
        )
        assert saved == self.model.save_progress(claim.id, claim.token, payload, lease), claim

    @rule(
        state=st.sampled_from(LIST_STATES),
        only=st.sampled_from([{}] + [{"queue": q} for q in QUEUES] + [{"key": k} for k in KEYS]),
        limit=st.integers(1, 3),
    )
    def browse(self, state: str, only: dict[str, str], limit: int) -> None:
        """An operator pages through one state, of one queue or key: each job once; by
        key, the jobs still in the store come in push order."""
        ids = self.listed(state, limit, **only)
        want = self.model.listed(state, **only)
        if "key" in only and state not in ("dead", "done"):
            assert ids == want, (state, only)
        else:
            assert sorted(ids) == sorted(want), (state, only)

    # -- what the store says, after every step -------------------------------------------

    @invariant()
    def agrees(self) -> None:
        model, store, now = self.model, self.store, self.model.t
        info = self.call(store.info(now))
        counts = {q.name: (q.size, q.running, q.scheduled, q.retrying) for q in info.queues}
        assert counts == {q: model.counts(q) for q in model.queues}
        assert info.dead == len(model.dead)
        for state in LIST_STATES:
            listed = self.listed(state)
            assert sorted(listed) == sorted(model.listed(state)), state
        for job_id in [*self.known, "nobody"]:
            status = self.call(store.status(job_id, now))
            assert (status.state, status.result, status.reason) == model.status(job_id), job_id
            self.check_record(job_id)
        busiest, stalled = self.call(store.keys(now))
        keys = {(k.key, k.queue, k.jobs, k.head, k.state) for k in busiest}
        assert keys == model.keys()
        assert {k.key for k in stalled} == {k[0] for k in keys if k[4] in ("retrying", "expired")}
        dead = self.call(store.dead_jobs())
        assert {d.id: (d.queue, d.payload, d.reason, d.key) for d in dead} == {
            i: (d.queue, d.payload, d.reason, d.key) for i, d in model.dead.items()
        }
        assert [d.died_at for d in dead] == sorted((d.died_at for d in dead), reverse=True)

    def listed(self, state: str, limit: int = 2, **only: str) -> list[str]:
        """Every page of ``state`` (of ``only``: a queue or key), followed to its end."""
        ids: list[str] = []
        after = None
        for _ in range(100):
            page, after = self.call(
                self.store.list_jobs(state, self.model.t, after=after, limit=limit, **only)
            )
            ids += [j.id for j in page]
            if after is None:
                return ids
        raise AssertionError(f"{state} {only}: the pages never end ({ids})")

    def check_record(self, job_id: str) -> None:
        model = self.model
        record = self.call(self.store.job(job_id, model.t))
        job = model.jobs.get(job_id)
        if job is not None:
            assert record is not None, job
            got = (record.state, record.queue, record.payload, record.key, record.worker)
            assert got == (model.state(job), job.queue, job.payload, job.key, job.worker), job
        elif job_id in model.dead:
            dead = model.dead[job_id]
            assert record is not None, dead
            assert (record.state, record.queue, record.payload, record.key) == (
                "dead",
                dead.queue,
                dead.payload,
                dead.key,
            )
        elif job_id in model.results:
            assert record is not None and (record.state, record.result) == (
                "done",
                model.results[job_id].result,
            )
        else:
            assert record is None, record


# -- one test per store ----------------------------------------------------------------------

EXAMPLES = 40  # per store, of 50 steps each: about 30 s on PostgreSQL, less elsewhere


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis", "postgres"])
def test_every_store_agrees_with_the_model(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    freeze(monkeypatch, START)
    place: Any = tmp_path
    if kind == "redis":
        place = request.getfixturevalue("redis_server")
    elif kind == "postgres":
        place = request.getfixturevalue("postgres_dsn")
    with asyncio.Runner() as runner:
        machine = type(
            f"{kind.capitalize()}Machine",
            (StoreMachine,),
            {"runner": runner, "open": staticmethod(OPEN[kind]), "place": place},
        )
        long = request.config.getoption("--chaos-long")
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=EXAMPLES * 20 if long else EXAMPLES,
                stateful_step_count=50,
                deadline=None,
                # Not explain: its tracing of every line takes minutes over a run's steps.
                phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
