"""The guard around an integration's third-party imports: a missing one names its extra.

Each integration imports its packages inside ``with extra(...)``: without it, a
newcomer who forgot the extra gets Python's bare ``No module named
'prometheus_client'``, which says neither that batchy needs it nor how to get it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from batchy import UsageError

__all__ = ["MissingExtraError", "extra"]


class MissingExtraError(UsageError, ModuleNotFoundError):
    """An integration's package is not installed; the message names the extra that installs it.

    A :class:`ModuleNotFoundError` too (``name`` is the missing package), so code
    that imports an integration only if it can, ``except ImportError``, still works.
    """


MissingExtraError.__module__ = "batchy_contrib"  # as imported and caught, in tracebacks


@contextlib.contextmanager
def extra(module: str, install: str, *packages: str) -> Iterator[None]:
    """Turn a missing ``packages`` in the block into a :class:`MissingExtraError` for ``module``.

    ``install`` is what to ``pip install`` (``"'batchy[prometheus]'"``). Only the
    listed packages are named so: any other missing module is a bug to see as is.
    """
    try:
        yield
    except ModuleNotFoundError as error:
        top = (error.name or "").partition(".")[0]
        if top not in packages:
            raise
        raise MissingExtraError(
            f"{module} needs the package {top!r}, which is not installed here; "
            f"install it with: pip install {install}",
            name=top,
        ) from error
