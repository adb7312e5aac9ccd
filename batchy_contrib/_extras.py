"""The guard around an integration's third-party imports: a missing one names its extra.

Each integration imports its packages inside ``with extra(...)``: without it, a
newcomer who forgot the extra gets Python's bare ``No module named
'prometheus_client'``, which says neither that batchy needs it nor how to get it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from batchy import UsageError

__all__ = ["MissingExtraError", "extra"]


class MissingExtraError(UsageError, ModuleNotFoundError):
    """An integration's package is not installed; the message names the extra that installs it.

    Or a module of it is missing: then the message names the file that was
    imported instead (a ``redis.py`` of one's own hides the package ``redis``).
    A :class:`ModuleNotFoundError` too (``name`` is the missing module), so code
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
        missing = error.name or ""
        top = missing.partition(".")[0]
        if top not in packages:
            raise
        found = sys.modules.get(top)
        if found is not None and missing != top:
            # The package imported, but not its submodule: what imported is not the
            # package the extra installs (a redis.py of one's own), or an older one.
            where = getattr(found, "__file__", None) or repr(found)
            raise MissingExtraError(
                f"{module} needs the module {missing!r}, which {top!r} at "
                f"{where} does not have: a file or "
                f"folder of your own named {top} may hide the installed package (rename "
                f"it), or the package may be too old (pip install -U {install})",
                name=missing,
            ) from error
        raise MissingExtraError(
            f"{module} needs the package {top!r}, which is not installed here; "
            f"install it with: pip install {install}",
            name=top,
        ) from error
