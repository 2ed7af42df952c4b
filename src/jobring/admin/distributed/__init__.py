"""Distributed runs in the admin: map / map-reduce sub-tasks, sharded runs with any count, the
parent's join and reduce (docs/distributed-jobs.md; the pure model is
:mod:`jobring.core.distributed`, the tables :mod:`jobring.admin.store.subtasks`).

- :mod:`.service`: map calls, results, the root task's callback, sharded fires, retry failed.
- :mod:`.pump`: sends pending sub-tasks to the group's executors; takes back lost ones.
"""
