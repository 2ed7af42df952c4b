"""A handler's workflow context additions through the admin (real store, real trigger service,
an executor double): a workflow node's /run carries the run's context, a success's
``workflowContext`` is merged like ``result_json`` (templated into the next node's params), a
failure's is not, an oversized one fails the attempt, and another group's token adds nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from jobring.admin.services.callbacks import CallbackService
from jobring.admin.services.workflows import WorkflowDriver
from jobring.admin.store import Store
from jobring.admin.store.records import GroupGuard, ResultOutcome
from jobring.admin.store.workflows import WorkflowRecord
from jobring.admin.trigger.trigger import FireRequest
from jobring.core.enums import TriggerType
from jobring.core.workflow import CONTEXT_MAX_BYTES, NodeStatus, WorkflowRun, parse_workflow, run_from_json
from jobring.protocol.models import WORKFLOW_CONTEXT_FIELD, HandleCallbackParam
from tests.admin.trigger_kit import HOSTS, T0, Env, make_env


@dataclass
class Flow:
    env: Env
    driver: WorkflowDriver
    callbacks: CallbackService

    def bodies(self) -> list[dict[str, Any]]:
        return [c.body for c in self.env.double.runs()]

    def body_of(self, params: str) -> dict[str, Any]:
        return [b for b in self.bodies() if b["executorParams"] == params][-1]

    async def workflow(self, doc: dict[str, Any]) -> WorkflowRecord:
        wf = await self.env.store.workflows.create("w", self.env.group_id, "", parse_workflow(doc).to_json(),
                                                   None, T0)
        record = await self.env.store.workflows.get(wf)
        assert record is not None
        return record

    async def report(self, params: str, code: int = 200, added: dict[str, Any] | None = None,
                     guard: GroupGuard | None = None) -> ResultOutcome:
        log_id = self.body_of(params)["logId"]
        (outcome,) = await self.callbacks.handle(
            [HandleCallbackParam(log_id, T0, code, None if code == 200 else "boom", added)], guard)
        await self.driver.wait_idle()
        await self.driver.tick()
        return outcome

    async def run(self, run_id: int) -> WorkflowRun:
        record = await self.env.store.workflows.get_run(run_id)
        assert record is not None and record.state is not None
        return run_from_json(record.state)


@pytest.fixture
async def flow(sqlite_store: Store) -> AsyncIterator[Flow]:
    env = await make_env(sqlite_store, HOSTS)
    driver = WorkflowDriver(sqlite_store, env.trigger, None, env.clock, node_id="node-a", stale_ms=30_000)
    callbacks = CallbackService(sqlite_store, env.trigger, env.clock)
    callbacks.results_listener = driver.notify
    try:
        yield Flow(env, driver, callbacks)
    finally:
        await driver.wait_idle()
        await callbacks.close()
        await env.trigger.close()


async def _two_steps(flow: Flow) -> int:
    job = await flow.env.job()
    workflow = await flow.workflow({
        "nodes": [{"key": "A", "job_id": job.id, "params": "A"},
                  {"key": "B", "job_id": job.id, "params": "B rows={{ rows }}"}],
        "edges": [{"from": "A", "to": "B"}]})
    run_id, _ = await flow.driver.start_run(workflow, {"day": "20261201"}, "alice")
    return run_id


async def test_a_success_adds_to_the_context_and_the_next_node_sees_it(flow: Flow) -> None:
    run_id = await _two_steps(flow)
    assert flow.body_of("A")[WORKFLOW_CONTEXT_FIELD] == {"day": "20261201"}
    assert await flow.report("A", added={"rows": 1234}) is ResultOutcome.APPLIED
    assert (await flow.run(run_id)).context == {"day": "20261201", "rows": 1234}
    body = flow.body_of("B rows=1234")
    assert body[WORKFLOW_CONTEXT_FIELD] == {"day": "20261201", "rows": 1234}


async def test_a_failure_adds_nothing(flow: Flow) -> None:
    run_id = await _two_steps(flow)
    await flow.report("A", code=500, added={"rows": 1})
    state = await flow.run(run_id)
    assert state.context == {"day": "20261201"}
    assert state.node("A").status is NodeStatus.FAILED


async def test_additions_over_the_cap_fail_the_attempt_with_a_message(flow: Flow) -> None:
    run_id = await _two_steps(flow)
    await flow.report("A", added={"big": "x" * CONTEXT_MAX_BYTES})
    state = await flow.run(run_id)
    assert state.context == {"day": "20261201"}
    assert state.node("A").status is NodeStatus.FAILED
    assert "over the cap of 65536" in state.node("A").message
    entry = await flow.env.store.logs.get(flow.body_of("A")["logId"])
    assert entry is not None and entry.handle_code == 500


async def test_another_groups_token_adds_nothing(flow: Flow) -> None:
    run_id = await _two_steps(flow)
    other = GroupGuard(only=frozenset({flow.env.group_id + 1}))
    assert await flow.report("A", added={"rows": 666}, guard=other) is ResultOutcome.NOT_FOUND
    (attempt,) = await flow.env.store.workflows.node_runs(run_id)
    assert attempt.context_added is None
    # The group's own report still counts.
    assert await flow.report("A", added={"rows": 1}) is ResultOutcome.APPLIED
    assert (await flow.run(run_id)).context["rows"] == 1


async def test_a_run_outside_a_workflow_carries_no_context(flow: Flow) -> None:
    job = await flow.env.job()
    await flow.env.trigger.fire(FireRequest(job, TriggerType.MANUAL, executor_param="plain"))
    assert WORKFLOW_CONTEXT_FIELD not in flow.body_of("plain")


def _nested(depth: int) -> dict[str, Any]:
    import orjson

    # As the callback's decoder builds it: orjson reads up to 1,024 levels, writes only 255.
    value: dict[str, Any] = orjson.loads('{"a":' * depth + "1" + "}" * depth)
    return value


@pytest.mark.parametrize("code", [200, 500])
async def test_additions_nested_too_deep_fail_the_attempt_not_the_callback(flow: Flow, code: int) -> None:
    run_id = await _two_steps(flow)
    assert await flow.report("A", code=code, added=_nested(300)) is ResultOutcome.APPLIED
    state = await flow.run(run_id)
    assert state.context == {"day": "20261201"}
    assert state.node("A").status is NodeStatus.FAILED
    (attempt,) = await flow.env.store.workflows.node_runs(run_id)
    assert attempt.context_added is None


async def test_a_job_moved_to_another_group_mid_run_is_not_fired_by_the_run(flow: Flow) -> None:
    """The run's group is checked at each fire, not only when the run started: a node's job
    moved to another group (by someone who may write both) is another group's job now, its
    log and its executor's; a run of this group's workflow no longer runs it."""
    from dataclasses import replace
    from datetime import UTC, datetime

    from jobring.admin.store.records import JobGroup
    from jobring.core.enums import AddressType

    first, second = await flow.env.job(), await flow.env.job()
    workflow = await flow.workflow({
        "nodes": [{"key": "A", "job_id": first.id, "params": "A"},
                  {"key": "B", "job_id": second.id, "params": "B"}],
        "edges": [{"from": "A", "to": "B"}]})
    run_id, _ = await flow.driver.start_run(workflow, {}, "alice")
    other = await flow.env.store.groups.create(
        JobGroup(app_name="other-app", title="Other", address_type=AddressType.MANUAL,
                 address_list=",".join(flow.env.double.addresses)),
        datetime.fromtimestamp(T0 / 1000, tz=UTC))
    await flow.env.store.jobs.update(replace(second, job_group=other))
    await flow.report("A")
    assert not [b for b in flow.bodies() if b["executorParams"] == "B"]
    state = await flow.run(run_id)
    assert state.node("B").status is NodeStatus.FAILED
    assert "another group" in state.node("B").message
