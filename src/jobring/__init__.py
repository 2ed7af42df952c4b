"""jobring: an XXL-JOB compatible scheduling center and embeddable executor.

The executor API is loaded on first use, so ``import jobring`` stays light
(the CLI and the admin do not pay for it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobring.executor.config import ExecutorSettings
    from jobring.executor.context import JobCancelled, JobContext, JobHandler, RunLogHandler, current_context
    from jobring.executor.executor import Executor, ExecutorError

__all__ = [
    "Executor",
    "ExecutorError",
    "ExecutorSettings",
    "JobCancelled",
    "JobContext",
    "JobHandler",
    "RunLogHandler",
    "current_context",
]

_LAZY = {
    "Executor": "jobring.executor.executor",
    "ExecutorError": "jobring.executor.executor",
    "ExecutorSettings": "jobring.executor.config",
    "JobCancelled": "jobring.executor.context",
    "JobContext": "jobring.executor.context",
    "JobHandler": "jobring.executor.context",
    "RunLogHandler": "jobring.executor.context",
    "current_context": "jobring.executor.context",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jobring' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
