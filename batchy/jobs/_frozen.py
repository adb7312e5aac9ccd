"""A quicker ``__init__`` for the frozen value classes a worker makes for every job.

A frozen dataclass refuses ``setattr``, so the ``__init__`` it generates sets
each field through ``object.__setattr__``: a global and an attribute look-up
and a generic call per field, three times what a plain class pays. A worker
makes a few such objects per job (the claim, the outcome, the hooks' events),
and they cost a no-op job more than its handler. :func:`quick_init` gives the
class an ``__init__`` that writes each slot through the slot's own descriptor
instead; what the class is and does is unchanged (it stays frozen, hashable,
equal by value, with the same parameters and defaults).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, TypeVar

__all__ = ["quick_init"]

T = TypeVar("T")


class _Factory:
    """The default of a field made by its factory (shown as dataclasses show it)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def quick_init(cls: type[T]) -> type[T]:
    """Replace the ``__init__`` of ``cls``, a ``@dataclass(frozen=True, slots=True)``."""
    params = dataclasses.fields(cls)  # type: ignore[arg-type]
    if not (cls.__dataclass_params__.frozen and "__slots__" in cls.__dict__):  # type: ignore[attr-defined]
        raise TypeError(f"quick_init({cls.__name__}): not a frozen dataclass with slots")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"quick_init({cls.__name__}): its __post_init__ would not be called")
    env: dict[str, Any] = {"_FACTORY": _FACTORY}
    signature, body = [], []
    for f in params:
        if not f.init or f.kw_only:
            raise TypeError(f"quick_init({cls.__name__}): field {f.name!r} is not a plain one")
        env[f"_set_{f.name}"] = getattr(cls, f.name).__set__
        if f.default is not dataclasses.MISSING:
            env[f"_default_{f.name}"] = f.default
            signature.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"_factory_{f.name}"] = f.default_factory
            signature.append(f"{f.name}=_FACTORY")
            body.append(f"if {f.name} is _FACTORY: {f.name} = _factory_{f.name}()")
        else:
            signature.append(f.name)
        body.append(f"_set_{f.name}(self, {f.name})")
    # Made as dataclasses make theirs: in the class's module (its annotations,
    # strings, resolve there: typing.get_type_hints), the helpers in a closure.
    helpers = ", ".join(env)
    source = (
        f"def __make__({helpers}):\n"
        f"  def __init__(self, {', '.join(signature)}):\n"
        + "".join(f"    {line}\n" for line in body)
        + "  return __init__\n"
    )
    made: dict[str, Any] = {}
    exec(source, sys.modules[cls.__module__].__dict__, made)  # one function, no loop per call
    init = made["__make__"](**env)
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    init.__annotations__ = cls.__init__.__annotations__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
