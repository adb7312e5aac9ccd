"""The checks of a :class:`~batchy.jobs.Worker`'s options: a bad one is a ConfigError saying why."""

from __future__ import annotations

import math

from ._errors import ConfigError

__all__ = ["checked_options"]


def checked_options(
    concurrency: int,
    prefetch: int,
    lease: float,
    heartbeat: float | None,
    poll_interval: float,
    shutdown_timeout: float,
) -> float:
    """Raise :class:`ConfigError` for an option with no meaning; the heartbeat (seconds)."""
    if type(concurrency) is not int or concurrency < 1:
        raise ConfigError(
            f"Worker concurrency={concurrency!r} must be an int >= 1 (jobs run at once)"
        )
    if type(prefetch) is not int or prefetch < 0:
        raise ConfigError(
            f"Worker prefetch={prefetch!r} must be an int >= 0 (jobs claimed ahead of a "
            "free slot; 0, the default, claims only for free slots)"
        )
    # The lease first: the default heartbeat is a third of it, so a heartbeat
    # check on a bad lease named a heartbeat nobody gave ("heartbeat=None").
    if not (math.isfinite(lease) and lease > 0):
        raise ConfigError(
            f"Worker lease={lease!r} must be a finite number of seconds > 0 (how long a "
            "claimed job stays this worker's without a heartbeat); e.g. lease=30"
        )
    if not poll_interval > 0 or shutdown_timeout < 0:
        raise ConfigError(
            f"Worker poll_interval={poll_interval!r} must be > 0 and "
            f"shutdown_timeout={shutdown_timeout!r} >= 0 (seconds)"
        )
    beat = heartbeat if heartbeat is not None else lease / 3
    if not 0 < beat < lease:
        raise ConfigError(
            f"Worker heartbeat={heartbeat!r} must be > 0 and shorter than lease={lease!r}, "
            "or a running job's lease runs out between renewals"
        )
    return beat
