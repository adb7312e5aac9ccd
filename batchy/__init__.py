"""batchy: write data access one key at a time; batchy runs it one batch per loader per round."""

from ._errors import (
    BatchyError,
    CycleError,
    InvalidKeyError,
    LoaderError,
    MissingKeyError,
    UsageError,
    YieldError,
    short_repr,
)
from ._future import Future, failed, resolved
from ._gather import gather
from ._hooks import BatchEvent, Hook, RoundEvent, add_hook, hooked, remove_hook
from ._loader import Loader, batched
from ._run import run
from ._scope import Scope, current_scope, scope
from ._stats import ScopeStats
from ._task import Task
from ._taskfn import TaskFunction, task
from ._watch import Watch
from .dataloader import DataLoader  # built on the names above: import it last

__all__ = [
    "BatchEvent",
    "BatchyError",
    "CycleError",
    "DataLoader",
    "Future",
    "Hook",
    "InvalidKeyError",
    "Loader",
    "LoaderError",
    "MissingKeyError",
    "RoundEvent",
    "Scope",
    "ScopeStats",
    "Task",
    "TaskFunction",
    "UsageError",
    "Watch",
    "YieldError",
    "add_hook",
    "batched",
    "current_scope",
    "failed",
    "gather",
    "hooked",
    "remove_hook",
    "resolved",
    "run",
    "scope",
    "short_repr",
    "task",
]

__version__ = "0.1.0"
