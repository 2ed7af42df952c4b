"""ctx.workflow: get/set/items, JSON-only values checked at set, the 64 KiB cap on additions,
present only for workflow node runs; the workflowContext field round-trips through /run and
callbacks (and the /run fast path), and is absent for other runs."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from jobring.executor.context import JobContext, JobHandler
from jobring.executor.http.decode import decode_trigger
from jobring.executor.runlog import RunLog
from jobring.executor.worker import JobRunner
from jobring.executor.workflow_context import CONTEXT_MAX_BYTES, ContextError, WorkflowContext
from jobring.protocol.models import WORKFLOW_CONTEXT_FIELD, HandleCallbackParam, ProtocolError, TriggerParam
from tests.executor.enginekit import Reports, trigger


class Lines:
    def write_line(self, line: str) -> None:
        del line


def _ctx(context: dict[str, object] | None) -> JobContext:
    return JobContext(job_id=1, params="", log_id=2, log_date_time=3, shard_index=0, shard_total=1,
                      sink=Lines(), line_format=lambda *parts: " ".join(map(str, parts)),
                      workflow_context=context)


def test_get_reads_the_start_context_and_the_runs_own_additions() -> None:
    wf = WorkflowContext({"day": "20261201", "rows": 1})
    assert wf.get("day") == "20261201" and wf.get("missing") is None and wf.get("missing", 7) == 7
    wf.set("rows", 1234)
    assert wf.get("rows") == 1234 and wf["rows"] == 1234 and "rows" in wf and "nope" not in wf
    assert dict(wf.items()) == {"day": "20261201", "rows": 1234}
    assert wf.additions() == {"rows": 1234}
    with pytest.raises(KeyError):
        wf["nope"]


def test_set_copies_the_value() -> None:
    wf = WorkflowContext({})
    files = ["a"]
    wf.set("files", files)
    files.append("b")
    assert wf.additions() == {"files": ["a"]}


@pytest.mark.parametrize(("key", "value", "why"), [
    ("when", object(), "not a JSON value"),
    ("x", float("nan"), "not a JSON number"),
    ("s", {1, 2}, "not a JSON value"),
    ("", 1, "context keys are strings"),
    ("d", {1: "a"}, "object keys must be strings"),
])
def test_set_refuses_what_is_not_json(key: str, value: object, why: str) -> None:
    wf = WorkflowContext({})
    with pytest.raises(ContextError, match=why):
        wf.set(key, value)
    assert wf.additions() == {}


def test_additions_past_the_cap_are_refused_at_set() -> None:
    wf = WorkflowContext({})
    wf.set("a", "x" * (CONTEXT_MAX_BYTES // 2))
    with pytest.raises(ContextError, match="over the cap of 65536"):
        wf.set("b", "x" * (CONTEXT_MAX_BYTES // 2))
    assert list(wf.additions()) == ["a"]


def test_only_a_workflow_node_run_has_ctx_workflow() -> None:
    assert _ctx(None).workflow is None
    ctx = _ctx({"rows": 5})
    assert ctx.workflow is not None and ctx.workflow.get("rows") == 5


def test_the_field_round_trips_through_run_and_callback_bodies() -> None:
    param = TriggerParam(job_id=1, log_id=2, workflow_context={"rows": 1234, "nested": {"a": [1]}})
    body = orjson.dumps(param.to_dict())
    assert TriggerParam.decode(body).workflow_context == {"rows": 1234, "nested": {"a": [1]}}
    assert decode_trigger(body) == param  # the fast path keeps it too
    plain = TriggerParam(job_id=1, log_id=2)
    assert WORKFLOW_CONTEXT_FIELD not in plain.to_dict()
    assert decode_trigger(orjson.dumps(plain.to_dict())).workflow_context is None

    item = HandleCallbackParam(2, 3, 200, None, {"rows": 1234})
    for v35 in (False, True):
        (back,) = HandleCallbackParam.decode_batch(HandleCallbackParam.encode_batch([item], v35=v35))
        assert back.workflow_context == {"rows": 1234}
    assert WORKFLOW_CONTEXT_FIELD not in HandleCallbackParam(2, 3, 200).to_dict()


def test_a_context_that_is_not_an_object_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match=WORKFLOW_CONTEXT_FIELD):
        HandleCallbackParam.decode({"logId": 1, "handleCode": 200, WORKFLOW_CONTEXT_FIELD: [1]})


def produce(ctx: JobContext) -> None:
    assert ctx.workflow is not None
    ctx.workflow.set("rows", ctx.workflow.get("rows", 0) + 1234)


def produce_then_fail(ctx: JobContext) -> None:
    assert ctx.workflow is not None
    ctx.workflow.set("rows", 1)
    ctx.fail("no")


def has_no_workflow(ctx: JobContext) -> None:
    if ctx.workflow is not None:
        ctx.fail("ctx.workflow outside a workflow")


HANDLERS = [JobHandler("produce", produce), JobHandler("produce_then_fail", produce_then_fail),
            JobHandler("plain", has_no_workflow), JobHandler("isolated", produce, isolation="process")]


async def test_a_success_reports_its_additions_a_failure_does_not(tmp_path: Path) -> None:
    reports = Reports()
    runner = JobRunner({h.name: h for h in HANDLERS}, RunLog(tmp_path / "logs"), reports, kill_grace_s=1.0)
    try:
        await runner.run(trigger(1, 1, "produce", workflow_context={"rows": 1}))
        await runner.run(trigger(2, 2, "produce_then_fail", workflow_context={}))
        await runner.run(trigger(3, 3, "plain"))
        await runner.run(trigger(4, 4, "isolated", workflow_context={"rows": 2}))
        ok = await reports.wait(1)
        assert (ok.handle_code, ok.workflow_context) == (200, {"rows": 1235})
        failed = await reports.wait(2)
        assert (failed.handle_code, failed.workflow_context) == (500, None)
        plain = await reports.wait(3)
        assert (plain.handle_code, plain.workflow_context) == (200, None)
        isolated = await reports.wait(4, within=30)
        assert (isolated.handle_code, isolated.workflow_context) == (200, {"rows": 1236})
    finally:
        await runner.close(timeout=2)
