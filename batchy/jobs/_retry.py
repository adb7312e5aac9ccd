"""When a failed job runs again: Sidekiq's backoff, and the :class:`Retry` a handler may raise.

The default delay before retry number ``count + 1`` (``count`` retries done so
far, starting at 0) is Sidekiq's current formula: ``count**4 + 15`` seconds
plus a random jitter of up to ``10 * (count + 1)`` seconds. With the default 25
retries a job keeps trying for about 20 days, long enough to ship a fix.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from ._errors import JobError
from ._times import check_delay

__all__ = ["DEFAULT_RETRIES", "Backoff", "NoRetry", "Retry", "sidekiq_backoff"]

#: Retries after the first failure, as in Sidekiq (about 20 days with the default backoff).
DEFAULT_RETRIES = 25

#: ``backoff(count, error) -> seconds``: ``count`` is how many retries were done so far.
Backoff = Callable[[int, BaseException], float]


def sidekiq_backoff(count: int, error: BaseException | None = None) -> float:
    """Seconds before the next try: ``count**4 + 15`` plus up to ``10 * (count + 1)`` of jitter."""
    return float(count**4 + 15) + random.uniform(0.0, 10.0 * (count + 1))


class Retry(JobError):
    """Raise it in a handler to be retried after ``delay`` seconds (default: the backoff).

    It counts as a failed attempt, so a job that always raises it still ends dead::

        @queue.job
        async def sync_account(account_id):
            if not await api_is_up():
                raise batchy.jobs.Retry(delay=60, reason="API down")
    """

    def __init__(self, delay: float | None = None, reason: str = "retry requested") -> None:
        if delay is not None:
            hint = ", or leave it out for the job's backoff"
            delay = check_delay(delay, "Retry", hint=hint)
        super().__init__(f"{reason} (retry in {delay:g}s)" if delay is not None else reason)
        self.delay = delay


class NoRetry(JobError):
    """Raise it in a handler to send the job to the dead set now, whatever retries are left.

    For failures that no retry can fix (the record is gone, the input is invalid)::

        @queue.job
        async def charge(card_id):
            card = await cards_by_id(card_id)
            if card is None:
                raise batchy.jobs.NoRetry(f"card {card_id} was deleted")

    Its message is the dead job's reason; chain the cause with ``raise ... from``.
    """
