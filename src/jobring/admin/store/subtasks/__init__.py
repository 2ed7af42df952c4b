"""Distributed runs: a parent run's join state and its sub-tasks (``jobring_distributed_run``,
``jobring_subtask``; the model is :mod:`jobring.core.distributed`).

One repository, :class:`DistributedRepository`, in parts: ``records`` (the records and the
pure helpers), ``transitions`` (events applied and the join, inside a write; every part
builds on it), ``maps`` (map calls, sharded and broadcast parents, the root's result),
``dispatch`` (what the pump reads and claims), ``results`` (events applied, parents' results,
retry of failed sub-tasks), ``recovery`` (the sub-tasks of a dead admin node) and ``reads``
(the run page, the reduce's input, retention).

The writes that come in floods during a large map (map calls, claims, results, retries,
retention) are bulk writes: on SQLite they take turns, one at a time, between the
scheduler's writes (``Db.write``, ``write_gate``), and claims and results are written
``Db.bulk_rows`` rows a transaction, so a map does not delay other jobs' fires.
"""

from __future__ import annotations

from jobring.admin.store.subtasks.dispatch import Dispatch
from jobring.admin.store.subtasks.maps import MapWrites
from jobring.admin.store.subtasks.reads import (
    Reads,
    delete_parents_of_deleted,
    delete_some_children,
    end_parents_of_deleted,
    lost_parents_condition,
    open_among,
    parents_among,
)
from jobring.admin.store.subtasks.records import (
    KIND_BCAST,
    KIND_MAP,
    KIND_PART,
    KIND_PRE,
    KIND_REDUCE,
    KIND_SHARD,
    ClaimedTask,
    DistributedRun,
    NewSubTask,
    SubTaskRow,
    TaskUpdate,
)
from jobring.admin.store.subtasks.recovery import Orphan, Recovery
from jobring.admin.store.subtasks.results import Results

__all__ = [
    "KIND_BCAST",
    "KIND_MAP",
    "KIND_PART",
    "KIND_PRE",
    "KIND_REDUCE",
    "KIND_SHARD",
    "ClaimedTask",
    "DistributedRepository",
    "DistributedRun",
    "NewSubTask",
    "Orphan",
    "SubTaskRow",
    "TaskUpdate",
    "delete_parents_of_deleted",
    "delete_some_children",
    "end_parents_of_deleted",
    "lost_parents_condition",
    "open_among",
    "parents_among",
]


class DistributedRepository(MapWrites, Dispatch, Results, Recovery, Reads):
    """Parent runs' join state and their sub-tasks."""
