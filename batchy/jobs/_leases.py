"""The claims a worker holds: their lease tokens, when each lease runs out, and losing one.

A claim is held from the cycle that claimed it until its outcome has been
through a cycle (applied or refused), so a finished job whose outcome waits for
the next round trip is still renewed. It is keyed by ``(job id, lease token)``:
a job the worker lost and then claimed again is a second claim, and the first
run's outcome must never pass for the second's.

When the store refuses a claim's token (a heartbeat, a progress save or an
outcome: the lease ran out and moved on while the worker's loop was blocked or
its process paused, or while the store could not be reached), the claim is
*lost*: the worker logs it once, in a whole sentence that says which of those it
was, stops renewing it, cancels its run if it still goes on, and drops its
outcome unsent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ._errors import PayloadError
from ._hooks import log
from ._model import Claimed, Outcome, decode
from ._serializer import Serializer

__all__ = ["Claim", "Leases"]

#: ``(job id, lease token)``: one claim of one job.
Claim = tuple[str, str]

#: How a lost job's lease ran out, and what to do about it: in an outage of the
#: store, or while the worker sent no heartbeat.
_OUTAGE = (
    "while the store could not be reached (its heartbeats failed)",
    "A lease longer than the store's outages keeps its jobs through them; else they "
    "run again, as here.",
)
_STALL = (
    "without a renewal",
    "Raise lease= above the longest pause of this worker, give the job a timeout= "
    "shorter than the lease if it can hang, and never block the event loop in a handler "
    "(await, or run blocking code in a thread): a blocked loop sends no heartbeats.",
)


@dataclass(slots=True)
class _Lease:
    job: Claimed
    until: float  # time.monotonic() at which the lease runs out unless renewed
    lost: bool = False  # the store refused its token: no longer this worker's job
    # Its outcome went out in a turn whose answer never came: that turn may have
    # applied it, so a refusal of the outcome handed in again says nothing.
    unsure: bool = False
    # Its outcome is out in a turn not answered yet: a heartbeat the store ran
    # after that turn is refused (the job is done), which says nothing either.
    sent: bool = False


class Leases:
    """The claims of one worker (``worker`` its id, ``lease`` its lease in seconds)."""

    def __init__(self, worker: str, lease: float, serializer: Serializer) -> None:
        self.worker = worker
        self.lease = lease
        self.serializer = serializer
        self._held: dict[Claim, _Lease] = {}
        self._beat_failed = -math.inf  # time.monotonic() of the last failed heartbeat
        self._newest: dict[str, str] = {}  # job id -> the token of its latest claim held

    def add(self, job: Claimed, sent: float) -> Claim:
        """A job claimed by a cycle sent at ``sent`` (monotonic): its lease starts no earlier.

        A claim this worker still holds of the same job has ended: its lease ran
        out while the worker stalled, and the worker's own next cycle gave the job
        back and claimed it anew. That claim is lost now, so that no heartbeat or
        turn names one job twice: stores answer them by job id, so a refusal of the
        old claim was taken for the new one too (its run cancelled), or the new
        one's renewal hid the old one's end.
        """
        claim = (job.id, job.token)
        earlier = self._held.get((job.id, self._newest.get(job.id, "")))
        if earlier is not None:
            self._lose(earlier, "this worker claimed it anew")
        self._held[claim] = _Lease(job, sent + self.lease)
        self._newest[job.id] = job.token
        return claim

    def claim_of(self, job_id: str) -> Claim | None:
        """The latest claim of ``job_id`` this worker holds, lost or not."""
        token = self._newest.get(job_id)
        return None if token is None else (job_id, token)

    def _pop(self, claim: Claim) -> _Lease | None:
        if self._newest.get(claim[0]) == claim[1]:
            del self._newest[claim[0]]
        return self._held.pop(claim, None)

    def holds(self, claim: Claim) -> bool:
        """True while ``claim`` is this worker's (not settled, not lost)."""
        lease = self._held.get(claim)
        return lease is not None and not lease.lost

    def fresh(self, claim: Claim) -> bool:
        """True if ``claim`` is held and its lease has not run out by this worker's reckoning."""
        lease = self._held.get(claim)
        if lease is None or lease.lost:
            return False
        if time.monotonic() < lease.until:
            return True
        self._lose(lease, "its lease ran out before its run began")
        return False

    def held(self) -> list[Claim]:
        """The claims to renew: every one not lost, finished or not."""
        return [claim for claim, lease in self._held.items() if not lease.lost]

    def unrenewed(self) -> None:
        """A heartbeat failed (the store could not be reached, or did not answer)."""
        self._beat_failed = time.monotonic()

    def renewed(self, claims: Sequence[Claim], lost: Iterable[str], sent: float) -> None:
        """A heartbeat sent at ``sent`` renewed ``claims`` except the ids in ``lost``."""
        refused = set(lost)
        for claim in claims:
            lease = self._held.get(claim)
            if lease is None:
                continue  # settled while the heartbeat was on its way
            if claim[0] in refused:
                if not (lease.unsure or lease.sent):  # (else settle says it, if so)
                    self._lose(lease, "its heartbeat was refused")
            else:
                lease.until = sent + self.lease

    def finished(self, claim: Claim, outcome: Outcome | None) -> Outcome | None:
        """The run of ``claim`` ended: the outcome to send (with its token), or None.

        ``outcome`` None means the run stopped because a progress save was refused.
        A lost claim's outcome is not sent: the store would refuse it anyway.
        """
        lease = self._held.get(claim)
        if lease is None or outcome is None or lease.lost:
            self._pop(claim)
            if lease is not None and outcome is None:
                self._lose(lease, "a progress save was refused")
            return None
        token = claim[1]
        return outcome if outcome.token == token else outcome.with_token(token)

    def release(self, claims: Iterable[Claim]) -> list[Outcome]:
        """Outcomes handing ``claims`` back to their queue; claims lost already are forgotten."""
        outcomes = []
        for claim in claims:
            if self.holds(claim):
                outcomes.append(Outcome(claim[0], "release", token=claim[1]))
            else:
                self.drop(claim)
        return outcomes

    def drop(self, claim: Claim) -> None:
        """Forget ``claim`` without an outcome (its run was cancelled or crashed)."""
        self._pop(claim)

    def sending(self, outcomes: Sequence[Outcome]) -> None:
        """``outcomes`` go out in a turn: their claims wait for its answer (see ``renewed``)."""
        for outcome in outcomes:
            lease = self._held.get((outcome.id, outcome.token))
            if lease is not None:
                lease.sent = True

    def unanswered(self, outcomes: Sequence[Outcome]) -> None:
        """``outcomes`` went out in a turn that failed: the store may have applied them."""
        for outcome in outcomes:
            lease = self._held.get((outcome.id, outcome.token))
            if lease is not None:
                lease.unsure = True

    def settle(self, outcomes: Sequence[Outcome], refused: Sequence[str]) -> None:
        """``outcomes`` went through a cycle, which refused the ids ``refused``."""
        refused_ids = set(refused)
        again = []
        now = time.monotonic()
        for outcome in outcomes:
            lease = self._pop((outcome.id, outcome.token))
            if lease is not None and outcome.id in refused_ids:
                # Within its lease, nobody else could have the job: the unanswered
                # turn applied it. Past it, the store may have handed it on.
                if lease.unsure and now < lease.until:
                    again.append(outcome.id)
                else:
                    self._lose(lease, f"its {outcome.kind} outcome was refused")
        if again:
            one = len(again) == 1
            log.info(
                "worker %s: the store refused %s handed in again within %s after a "
                "turn whose answer was lost (%s %s): that turn applied %s; nothing to do",
                self.worker,
                "1 outcome" if one else f"{len(again)} outcomes",
                "its lease" if one else "their leases",
                "job" if one else "jobs",
                ", ".join(sorted(again)),
                "it" if one else "them",
            )

    def _lose(self, lease: _Lease, how: str) -> None:
        if lease.lost:
            return  # said once already
        lease.lost = True
        job = lease.job
        try:
            name = decode(job, self.serializer).job
        except PayloadError:
            name = "?"
        over = max(0.0, time.monotonic() - lease.until)
        # A heartbeat that failed since the lease's last renewal: the store was out
        # of reach, and the worker's loop, which sent it, was not to blame.
        outage = self._beat_failed >= lease.until - self.lease
        log.warning(
            "worker %s lost job %s (%s, queue %r): %s, %.1fs after its %gs lease ran out "
            "%s, so the store gave it to another worker and only that worker's outcome "
            "counts; this worker drops its own. %s",
            self.worker,
            job.id,
            name,
            job.queue,
            how,
            over,
            self.lease,
            _OUTAGE[0] if outage else _STALL[0],
            _OUTAGE[1] if outage else _STALL[1],
        )
