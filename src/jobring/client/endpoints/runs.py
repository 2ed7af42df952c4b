"""Runs (``/runs``): the run log rows, their executor logs, kill and clean-up."""

from __future__ import annotations

from collections.abc import Sequence

from jobring.client.call import (
    ApiGroup,
    Call,
    Endpoint,
    JsonObject,
    M,
    as_list,
    as_object,
    compact,
    get,
    post,
)
from jobring.client.core import path_part
from jobring.client.page import Page, as_page


def _run(run_id: int) -> str:
    return f"/runs/{path_part(run_id)}"


def list_runs(
    *,
    group: int | None = None,
    job: int | None = None,
    status: str | None = None,
    state: str | Sequence[str] | None = None,
    trigger_from: int | None = None,
    trigger_to: int | None = None,
    offset: int = 0,
    limit: int = 50,
    cursor: str | None = None,
) -> Call[Page]:
    """Runs, newest first; ``state``: one or more run states (scheduled, dispatching,
    running, success, failed, killed, timed_out, lost, skipped; see ``jobring.core.runstate``),
    by default every state but scheduled; ``status`` (all, success, fail, running) is the
    older coarse filter; ``trigger_from`` and ``trigger_to`` bound the trigger time (epoch ms);
    ``cursor``: the previous page's ``next_cursor`` (cheaper than a large offset)."""
    states = state if state is None or isinstance(state, str) else ",".join(state)
    return get(
        "/runs", as_page, job_group=group, job_id=job, status=status, state=states,
        trigger_from=trigger_from,
        trigger_to=trigger_to, offset=offset, limit=limit, cursor=cursor,
    )


def get_run(run_id: int) -> Call[JsonObject]:
    """One run."""
    return get(_run(run_id), as_object)


def run_attempts(run_id: int) -> Call[list[JsonObject]]:
    """Every attempt of the run's chain, first run first (each retry names the run it
    re-runs in ``retry_of``)."""
    return get(_run(run_id) + "/attempts", as_list)


def run_log(run_id: int, from_line: int = 1) -> Call[JsonObject]:
    """The run's log from line ``from_line`` on, read from its executor:
    ``{"from_line_num", "to_line_num", "log_content", "is_end"}``."""
    return get(_run(run_id) + "/log", as_object, from_line=from_line)


def kill_run(run_id: int) -> Call[JsonObject]:
    """Ask the run's executor to kill it: ``{"killed": bool, "msg": str}``."""
    return post(_run(run_id) + "/kill", as_object)


def cancel_run(run_id: int) -> Call[JsonObject]:
    """Cancel a queued run (flow control); the run, now ``killed``."""
    return post(_run(run_id) + "/cancel", as_object)


def clear_runs(rule: str, *, group: int | None = None, job: int | None = None) -> Call[JsonObject]:
    """Delete old runs by ``rule`` (older_than_1_day ... keep_last_100k, all):
    ``{"deleted": n}``."""
    return post("/runs/clear", as_object, compact({"rule": rule, "job_group": group, "job_id": job}))


def run_subtasks(run_id: int, *, status: str | None = None, after_id: int = 0, limit: int = 100
                 ) -> Call[JsonObject]:
    """A distributed run's progress and one page of its sub-tasks by id:
    ``{"progress": {...}, "items": [...], "next_after_id": id | None}`` (``status``: pending,
    running, succeeded, failed, cancelled)."""
    return get(_run(run_id) + "/subtasks", as_object, status=status, after_id=after_id, limit=limit)


def retry_failed_subtasks(run_id: int) -> Call[JsonObject]:
    """Retry only the failed sub-tasks of an ended distributed run: ``{"retried": n}``."""
    return post(_run(run_id) + "/retry-failed", as_object)


class RunsApi(ApiGroup[M]):
    """Runs of jobs (the reference's trigger log)."""

    list = Endpoint(list_runs)
    get = Endpoint(get_run)
    attempts = Endpoint(run_attempts)
    log = Endpoint(run_log)
    kill = Endpoint(kill_run)
    cancel = Endpoint(cancel_run)
    subtasks = Endpoint(run_subtasks)
    retry_failed = Endpoint(retry_failed_subtasks)
    clear = Endpoint(clear_runs)
