"""`jobring runs subtasks` and `jobring runs retry-failed`: a distributed run's progress and
sub-tasks, and retrying only its failed sub-tasks (docs/distributed-jobs.md)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from jobring.cli.remote import (
    EXIT_FAILURE,
    positive_int,
    print_json,
    print_result,
    print_table,
    remote_parser,
    run_remote,
)
from jobring.client import AdminClient

SUBTASK_STATUSES = ("pending", "running", "succeeded", "failed", "cancelled")
_RESULT_SHOWN = 60


def _short(value: Any) -> str:
    if value is None:
        return "-"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _RESULT_SHOWN else text[:_RESULT_SHOWN - 3] + "..."


def progress_line(progress: dict[str, Any]) -> str:
    """``map mapping: 40 of 100 done (38 succeeded, 2 failed), 10 running, 50 pending``."""
    done = progress["succeeded"] + progress["failed"]
    line = (f"{progress['kind']} {progress['phase']}: {done} of {progress['total']} done "
            f"({progress['succeeded']} succeeded, {progress['failed']} failed), "
            f"{progress['running']} running, {progress['pending']} pending")
    if progress.get("reduce_task"):
        line += f"; reduce {progress['reduce_task']}"
        if progress.get("result") is not None:
            line += f" = {_short(progress['result'])}"
    return line


def _subtasks(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        page = admin.runs.subtasks(args.run_id, status=args.status, after_id=args.after, limit=args.limit)
        if args.json:
            print_json(page)
            return 0
        if page["progress"] is None:
            print(f"run {args.run_id} has no sub-tasks (it neither mapped nor was sharded)")
            return 0
        print(progress_line(page["progress"]))
        print_table(page["items"], [
            ("ID", "id"), ("KEY", "key"), ("TASK", "task"), ("STATUS", "status"), ("ATTEMPT", "attempt"),
            ("EXECUTOR", "executor_address"),
            ("RESULT / MESSAGE", lambda t: _short(t["result"]) if t["status"] == "succeeded"
             else t["message"]),
        ])
        if page.get("next_after_id"):
            print(f"more: --after {page['next_after_id']}")
        return 0

    return run_remote(args, action)


def _retry_failed(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        result = admin.runs.retry_failed(args.run_id)
        print_result(args, result,
                     f"run {args.run_id}: {result['retried']} failed sub-task(s) dispatched again")
        return 0 if result.get("retried", 0) >= 0 else EXIT_FAILURE

    return run_remote(args, action)


def add_commands(commands: Any) -> None:
    """Add the commands under ``jobring runs``."""
    subtasks = remote_parser(commands, "subtasks", "a distributed run's progress and sub-tasks")
    subtasks.add_argument("run_id", type=positive_int, metavar="RUN_ID")
    subtasks.add_argument("--status", choices=SUBTASK_STATUSES, default=None,
                          help="only sub-tasks in this status")
    subtasks.add_argument("--after", type=positive_int, default=0, metavar="ID",
                          help="the sub-tasks after this id (the 'more:' line of the previous page)")
    subtasks.add_argument("--limit", type=positive_int, default=50, metavar="N",
                          help="at most N (default 50)")
    subtasks.set_defaults(handler=_subtasks)
    retry = remote_parser(commands, "retry-failed", "retry only the failed sub-tasks of an ended run")
    retry.add_argument("run_id", type=positive_int, metavar="RUN_ID")
    retry.set_defaults(handler=_retry_failed)
