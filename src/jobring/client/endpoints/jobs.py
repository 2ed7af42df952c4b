"""Jobs (``/jobs``, ``/schedules/preview``) and their GLUE source (``/jobs/{id}/glue``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from jobring.client.call import (
    ApiGroup,
    Call,
    Endpoint,
    JsonObject,
    M,
    as_list,
    as_nothing,
    as_object,
    compact,
    delete,
    get,
    patch,
    post,
    put,
)
from jobring.client.core import path_part
from jobring.client.page import Page, as_page


def _job(job_id: int) -> str:
    return f"/jobs/{path_part(job_id)}"


def list_jobs(
    *,
    group: int | None = None,
    trigger_status: int | None = None,
    desc: str | None = None,
    handler: str | None = None,
    author: str | None = None,
    sort: str | None = None,
    offset: int = 0,
    limit: int = 50,
) -> Call[Page]:
    """Jobs the caller may see; ``trigger_status`` 1 running / 0 stopped; ``desc``,
    ``handler`` and ``author`` match substrings; ``sort``: id_desc, id_asc, next_time, desc."""
    return get(
        "/jobs", as_page, job_group=group, trigger_status=trigger_status, desc=desc, handler=handler,
        author=author, sort=sort, offset=offset, limit=limit,
    )


def get_job(job_id: int) -> Call[JsonObject]:
    """One job."""
    return get(_job(job_id), as_object)


def create_job(fields: Mapping[str, Any]) -> Call[JsonObject]:
    """A new (stopped) job from the API's job fields (``job_group``, ``job_desc``,
    ``schedule_type``, ``schedule_conf``, ``executor_handler``...); returns it."""
    return post("/jobs", as_object, dict(fields))


def update_job(job_id: int, changes: Mapping[str, Any]) -> Call[JsonObject]:
    """Change some fields of a job; returns the job as stored."""
    return patch(_job(job_id), as_object, dict(changes))


def copy_job(job_id: int) -> Call[JsonObject]:
    """A stopped copy of the job; returns the copy."""
    return post(_job(job_id) + "/copy", as_object)


def delete_job(job_id: int) -> Call[None]:
    """Delete the job."""
    return delete(_job(job_id), as_nothing)


def start_job(job_id: int) -> Call[JsonObject]:
    """Start scheduling the job; returns it with its next fire time."""
    return post(_job(job_id) + "/start", as_object)


def stop_job(job_id: int, *, reason: str | None = None) -> Call[JsonObject]:
    """Stop (pause) scheduling the job; ``reason`` is kept with who and when until it starts."""
    return post(_job(job_id) + "/stop", as_object, None if reason is None else {"reason": reason})


def trigger_job(
    job_id: int, *, executor_param: str | None = None, addresses: Sequence[str] | None = None
) -> Call[JsonObject]:
    """Run the job once now, optionally with other params or on given addresses only;
    returns ``{"run_ids": [...], "trigger_code": ..., "trigger_msg": ...}``."""
    body = compact({"executor_param": executor_param, "addresses": list(addresses) if addresses else None})
    return post(_job(job_id) + "/trigger", as_object, body)


def trigger_job_at(
    job_id: int,
    *,
    at: datetime | None = None,
    delay: timedelta | None = None,
    params: str | None = None,
    addresses: Sequence[str] | None = None,
) -> Call[JsonObject]:
    """Run the job once later: at ``at`` (a naive datetime is local time, as
    ``datetime.timestamp`` reads it) or after ``delay``; durable, fired once by one admin
    node. Returns the pending run (``id``, ``fire_at`` epoch ms, ``state`` "scheduled").
    Exactly one of ``at`` and ``delay`` must be given (the admin answers 422 otherwise)."""
    body = compact({
        "at": int(at.timestamp() * 1000) if at is not None else None,
        "delay_ms": int(delay.total_seconds() * 1000) if delay is not None else None,
        "executor_param": params, "addresses": list(addresses) if addresses else None,
    })
    return post(_job(job_id) + "/trigger-at", as_object, body)


def delayed_runs(job_id: int) -> Call[list[JsonObject]]:
    """The job's pending delayed runs, soonest first."""
    return get(_job(job_id) + "/delayed", as_list)


def all_delayed_runs(
    *, group: int | None = None, job_id: int | None = None, limit: int = 100
) -> Call[list[JsonObject]]:
    """Pending delayed runs of every job the caller may see (or of one group or job), soonest
    first."""
    return get("/delayed-runs", as_list, job_group=group, job_id=job_id, limit=limit)


def cancel_delayed(job_id: int, delayed_id: int) -> Call[None]:
    """Cancel a pending delayed run."""
    return delete(f"{_job(job_id)}/delayed/{path_part(delayed_id)}", as_nothing)


def backfill_job(
    job_id: int, *, start: str | int | None = None, end: str | int | None = None,
    dates: Sequence[str] | None = None, order: str = "oldest_first", parallelism: int = 1,
    honour_calendars: bool = False, dry_run: bool = False,
) -> Call[JsonObject]:
    """Backfill the job's instants in ``start``..``end`` (both included) or on ``dates`` (local
    days); with ``dry_run`` only list them."""
    body = compact({"start": start, "end": end, "dates": list(dates) if dates else None, "order": order,
                    "parallelism": parallelism, "honour_calendars": honour_calendars or None,
                    "dry_run": dry_run or None})
    return post(_job(job_id) + "/backfill", as_object, body)


def job_backfills(job_id: int, *, limit: int = 20) -> Call[list[JsonObject]]:
    """The job's backfills with their progress, newest first."""
    return get(_job(job_id) + "/backfills", as_list, limit=limit)


def get_backfill(backfill_id: int) -> Call[JsonObject]:
    """A backfill and its progress."""
    return get(f"/backfills/{path_part(backfill_id)}", as_object)


def cancel_backfill(backfill_id: int) -> Call[JsonObject]:
    """Cancel a backfill: no further instant starts (runs in progress finish)."""
    return delete(f"/backfills/{path_part(backfill_id)}", as_object)


def preview_schedule(
    schedule_type: str,
    schedule_conf: str | None = None,
    *,
    timezone: str | None = None,
    count: int = 5,
    after: int | None = None,
    timing: Mapping[str, Any] | None = None,
    group: int | None = None,
    job_id: int | None = None,
) -> Call[JsonObject]:
    """The next ``count`` fire times of a schedule (epoch ms in ``times``, ISO in ``times_iso``);
    with ``timing`` (and the ``group`` whose calendars it names) or a saved ``job_id``, under
    its timing rules: ``fires`` (logical instant and start) and ``excluded`` instants."""
    body = compact({
        "schedule_type": schedule_type, "schedule_conf": schedule_conf, "timezone": timezone,
        "count": count, "after": after, "timing": None if timing is None else dict(timing),
        "job_group": group, "job_id": job_id,
    })
    return post("/schedules/preview", as_object, body)


class JobsApi(ApiGroup[M]):
    """Job definitions and their scheduling state."""

    list = Endpoint(list_jobs)
    get = Endpoint(get_job)
    create = Endpoint(create_job)
    update = Endpoint(update_job)
    copy = Endpoint(copy_job)
    delete = Endpoint(delete_job)
    start = Endpoint(start_job)
    stop = Endpoint(stop_job)
    trigger = Endpoint(trigger_job)
    trigger_at = Endpoint(trigger_job_at)
    delayed = Endpoint(delayed_runs)
    all_delayed = Endpoint(all_delayed_runs)
    cancel_delayed = Endpoint(cancel_delayed)
    preview = Endpoint(preview_schedule)
    backfill = Endpoint(backfill_job)
    backfills = Endpoint(job_backfills)
    get_backfill = Endpoint(get_backfill)
    cancel_backfill = Endpoint(cancel_backfill)


def get_glue(job_id: int) -> Call[JsonObject]:
    """The job's current GLUE source."""
    return get(_job(job_id) + "/glue", as_object)


def save_glue(job_id: int, source: str, remark: str) -> Call[JsonObject]:
    """Save a new version of the job's GLUE source."""
    return put(_job(job_id) + "/glue", as_object, {"glue_source": source, "glue_remark": remark})


def glue_history(job_id: int) -> Call[list[JsonObject]]:
    """Earlier versions of the job's GLUE source, newest first."""
    return get(_job(job_id) + "/glue/versions", as_list)


def restore_glue(job_id: int, version_id: int) -> Call[JsonObject]:
    """Make an earlier version the job's current GLUE source."""
    return post(f"{_job(job_id)}/glue/versions/{path_part(version_id)}/restore", as_object)


class GlueApi(ApiGroup[M]):
    """GLUE (script) sources of jobs, with their version history."""

    get = Endpoint(get_glue)
    save = Endpoint(save_glue)
    history = Endpoint(glue_history)
    restore = Endpoint(restore_glue)
