"""/runs: the run log — list, detail, the executor's live log, kill, clear old runs."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query

from jobring.admin.api.management.deps import Reader, Services, Writer, ensure_group_read, ensure_group_write
from jobring.admin.api.management.errors import ERROR_RESPONSES, ApiError, not_found
from jobring.admin.api.management.models import (
    MAX_EPOCH_MS,
    MAX_INT32,
    MAX_INT64,
    ClearIn,
    ClearOut,
    KillOut,
    PageOut,
    RunLogOut,
    RunOut,
)
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.security.principal import Principal
from jobring.admin.services.audit import AuditAction, Outcome
from jobring.admin.store.records import HandleResult, LogEntry, LogStatus, RunCursor, Tally
from jobring.admin.trigger.fires import run_candidates, sent_time_ms
from jobring.core.enums import HandleCode
from jobring.core.runstate import KILLED_BY_USER, RunState
from jobring.core.timefmt import iso_utc
from jobring.errors import Conflict
from jobring.protocol.models import LogParam, LogResult, ProtocolError

router = APIRouter(tags=["runs"], responses=ERROR_RESPONSES)

RunId = Annotated[int, Path(ge=1, le=MAX_INT64)]
_UNAVAILABLE: dict[int | str, dict[str, Any]] = {
    502: ERROR_RESPONSES[400] | {"description": "The executor failed to answer"},
    503: ERROR_RESPONSES[400] | {"description": "Executor calls unavailable"},
}


def _instant(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


# Beyond this many matching runs the total is estimated (from the time the newest of them span,
# store/run_estimate.py): counting a million rows exactly costs more than the page itself
# (bench/console_api.py).
RUNS_COUNT_CAP = 1_000
_CURSOR = re.compile(r"([0-9]{1,17})-([0-9]{1,19})")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Fires recorded ahead are not runs yet: listed only when asked for.
_LISTED_BY_DEFAULT = frozenset(RunState) - {RunState.SCHEDULED}


_STATE_NAME = "(?:" + "|".join(s.value for s in RunState) + ")"
# What _states accepts, for schema readers: state names separated by commas, spaces around.
_STATES_PATTERN = f"^ *(?:{_STATE_NAME} *)?(?:, *(?:{_STATE_NAME} *)?)*$"


def _states(given: list[str] | None) -> frozenset[RunState] | None:
    """``state`` query values (repeated and/or comma separated) as states; None when absent."""
    if not given:
        return None
    states: set[RunState] = set()
    for part in (p.strip() for value in given for p in value.split(",")):
        if not part:
            continue
        try:
            states.add(RunState(part))
        except ValueError:
            known = ", ".join(s.value for s in RunState)
            raise ApiError(422, f"state: unknown run state {part[:40]!r} (one of {known})", "state") from None
    return frozenset(states) if states else None


async def _load_run(services: ManagementServices, principal: Principal, run_id: int) -> LogEntry:
    entry = await services.store.logs.get(run_id)
    if entry is None:
        raise not_found("run", run_id)
    ensure_group_read(principal, entry.job_group, not_found("run", run_id))
    return entry


@router.get("/runs", response_model=PageOut[RunOut], summary="List runs, newest (or oldest) first")
async def list_runs(
    services: Services,
    principal: Reader,
    job_group: Annotated[int | None, Query(ge=1, le=MAX_INT32)] = None,
    job_id: Annotated[int | None, Query(ge=1, le=MAX_INT32)] = None,
    status: LogStatus | None = None,
    state: Annotated[
        list[str] | None,
        Query(description="run states, repeated or comma separated; without `state` and `status`, "
              "every state but `scheduled`",
              json_schema_extra={"items": {"type": "string", "pattern": _STATES_PATTERN}}),
    ] = None,
    trigger_from: Annotated[int | None, Query(ge=0, le=MAX_EPOCH_MS, description="epoch ms")] = None,
    trigger_to: Annotated[int | None, Query(ge=0, le=MAX_EPOCH_MS, description="epoch ms")] = None,
    offset: Annotated[int, Query(ge=0, le=MAX_INT32)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[
        str | None,
        Query(max_length=48, description="the `next_cursor` of the previous page: list the runs after "
              "it (then `offset` skips from there); cheaper than a large offset"),
    ] = None,
    order: Annotated[
        Literal["newest", "oldest"],
        Query(description="newest first (by trigger time, then id), or oldest first: the last page of the "
              "other order"),
    ] = "newest",
) -> PageOut[RunOut]:
    if job_group is not None:
        ensure_group_read(principal, job_group)
        group_ids: list[int] | None = [job_group]
    else:
        group_ids = principal.readable_group_ids()
    states = _states(state)
    if states is None and status is None:
        states = _LISTED_BY_DEFAULT
    now_ms = services.now_ms()
    page = await services.store.logs.list(
        group_ids=group_ids,
        job_id=job_id,
        status=status or LogStatus.ALL,
        states=states,
        now_ms=now_ms,
        trigger_from=_instant(trigger_from),
        trigger_to=_instant(trigger_to),
        offset=offset,
        limit=limit,
        before=_cursor(cursor),
        count_cap=RUNS_COUNT_CAP,
        oldest_first=order == "oldest",
    )
    next_cursor = None
    last = page.items[-1] if len(page.items) == limit else None
    if last is not None and last.trigger_time is not None:  # runs are always written with one
        next_cursor = f"{_epoch_us(last.trigger_time)}-{last.id}"
    return PageOut[RunOut](
        items=[RunOut.of(e, now_ms) for e in page.items], total=page.total, offset=offset, limit=limit,
        total_exact=page.total_exact, next_cursor=next_cursor,
    )


def _epoch_us(value: datetime) -> int:
    delta = value.replace(tzinfo=UTC) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _cursor(given: str | None) -> RunCursor | None:
    """A ``next_cursor`` (``<trigger time, epoch µs>-<run id>``) back as a cursor."""
    if given is None:
        return None
    found = _CURSOR.fullmatch(given)
    if found is None or int(found[1]) > MAX_EPOCH_MS * 1000 or not 1 <= int(found[2]) <= MAX_INT64:
        raise ApiError(422, "cursor: not a cursor this listing returned", "cursor")
    return RunCursor(_EPOCH + timedelta(microseconds=int(found[1])), int(found[2]))


@router.get("/runs/{run_id}", response_model=RunOut, summary="One run")
async def get_run(run_id: RunId, services: Services, principal: Reader) -> RunOut:
    return RunOut.of(await _load_run(services, principal, run_id), services.now_ms())


@router.get("/runs/{run_id}/attempts", response_model=list[RunOut],
            summary="Every attempt of a run (the first run, then its retries)")
async def run_attempts(run_id: RunId, services: Services, principal: Reader) -> list[RunOut]:
    entry = await _load_run(services, principal, run_id)
    now_ms = services.now_ms()
    # Retries stay in their run's job, hence its group: readable as the run is.
    return [RunOut.of(e, now_ms) for e in await services.store.logs.attempts(entry.id)
            if e.job_group == entry.job_group]


@router.get(
    "/runs/{run_id}/log",
    response_model=RunLogOut,
    responses=_UNAVAILABLE,
    summary="The run's log on its executor, from a line on",
)
async def run_log(
    run_id: RunId,
    services: Services,
    principal: Reader,
    from_line: Annotated[int, Query(ge=1, le=MAX_INT32)] = 1,
) -> RunLogOut:
    entry = await _load_run(services, principal, run_id)
    if not entry.executor_address:
        state = RunOut.of(entry, services.now_ms()).state
        waiting = not state.is_final
        if waiting:
            planned = _instant(entry.planned_time) if entry.planned_time is not None else None
            when = "" if planned is None else f" for {iso_utc(planned)}"
            text = f"(this run is {state.value}{when}: not dispatched to an executor yet)"
        else:
            text = "(this run was not dispatched to an executor)"
        # A run still to be dispatched has more to come: a follower keeps waiting.
        return RunLogOut(
            from_line_num=from_line, to_line_num=from_line - 1, log_content=text, is_end=not waiting
        )
    if services.executors is None:
        raise ApiError(503, "executor calls are not available on this node")
    # Asked with the instant it was sent with (an XXL-JOB executor looks in that day's folder).
    param = LogParam(log_date_tim=sent_time_ms(entry), log_id=entry.id, from_line_num=from_line)
    token, app_name = await _executor_token(services, entry.job_group)
    answer = await services.executors.log(entry.executor_address, param, token, app_name)
    if not answer.ok or not isinstance(answer.content, dict):
        raise ApiError(
            502, f"executor {entry.executor_address} did not return the log: {answer.msg or 'no content'}"
        )
    try:
        result = LogResult.decode(answer.content)
    except ProtocolError as exc:
        raise ApiError(502, f"executor {entry.executor_address} returned an unreadable log: {exc}") from None
    # A finished run's log is complete once the executor has nothing more to give.
    is_end = result.is_end or (entry.handle_code != 0 and result.to_line_num < result.from_line_num)
    return RunLogOut(
        from_line_num=result.from_line_num,
        to_line_num=result.to_line_num,
        log_content=result.log_content,
        is_end=is_end,
    )


async def _executor_token(services: ManagementServices, group_id: int) -> tuple[str | None, str | None]:
    """The token the run's executor expects (its group's own, else the global one), and the
    group's appname (how that appname's executor at the address speaks was learned)."""
    group = await services.store.groups.get(group_id)
    token = (group.access_token if group else None) or services.secrets.access_token
    return token, group.app_name if group else None


@router.post(
    "/runs/{run_id}/kill",
    response_model=KillOut,
    responses=_UNAVAILABLE,
    summary="Kill a running run on its executor",
)
async def kill_run(run_id: RunId, services: Services, principal: Writer) -> KillOut:
    entry = await _load_run(services, principal, run_id)
    ensure_group_write(principal, entry.job_group, not_found("run", run_id))
    if entry.trigger_code != HandleCode.SUCCESS or entry.handle_code != HandleCode.UNKNOWN:
        raise ApiError(409, f"run {run_id} is not running")
    if services.executors is None:
        raise ApiError(503, "executor calls are not available on this node")
    if not entry.executor_address:
        raise ApiError(409, f"run {run_id} has no executor address")
    token, app_name = await _executor_token(services, entry.job_group)
    answer = await services.executors.kill(entry.executor_address, entry.job_id, token, app_name,
                                           runs=run_candidates(entry))
    await services.audit.record(
        principal, AuditAction.RUN_KILL, target_type="run", target_id=entry.id, group_id=entry.job_group,
        outcome=Outcome.SUCCESS if answer.ok else Outcome.FAILURE, details={"job_id": entry.job_id},
    )
    if not answer.ok:
        return KillOut(killed=False, msg=answer.msg or "the executor refused to kill the run")
    message = f"{KILLED_BY_USER} ({principal.user.username})" + (f": {answer.msg}" if answer.msg else "")
    await services.store.logs.record_results(
        [
            HandleResult(
                log_id=entry.id,
                handle_code=int(HandleCode.FAIL),
                handle_msg=message,
                handle_time=services.now_naive_utc(),
            )
        ]
    )
    return KillOut(killed=True, msg=message)


@router.post("/runs/clear", response_model=ClearOut, summary="Delete old runs by rule")
async def clear_runs(body: ClearIn, services: Services, principal: Writer) -> ClearOut:
    group_id = body.job_group
    if body.job_id is not None:
        job = await services.store.jobs.get(body.job_id)
        if job is not None and principal.can_read_group(job.job_group):  # else: as a missing job
            if group_id is not None and group_id != job.job_group:
                raise Conflict("job_id: the job is not in job_group", "job_id")  # as stored: 409
            group_id = job.job_group
    if group_id is None:
        if not principal.is_admin:
            raise ApiError(403, "only admins may clear runs of every group; give job_group")
    else:
        ensure_group_write(principal, group_id)
    # Done in short writes: one that fails midway has deleted some, and is audited with them.
    tally = Tally()
    try:
        deleted = await services.store.logs.clear(
            body.rule, services.now_naive_utc(), group_id=group_id, job_id=body.job_id, tally=tally
        )
    except Exception:
        await services.audit.record(
            principal, AuditAction.RUNS_CLEAR, group_id=group_id, outcome=Outcome.FAILURE,
            details={"rule": body.rule, "job_id": body.job_id, "deleted": tally.count},
        )
        raise
    await services.audit.record(
        principal, AuditAction.RUNS_CLEAR, group_id=group_id,
        details={"rule": body.rule, "job_id": body.job_id, "deleted": deleted},
    )
    return ClearOut(deleted=deleted)
