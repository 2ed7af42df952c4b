"""Repairs: stop, retry from the failed nodes, mark a node succeeded, re-run from a node."""

from __future__ import annotations

from typing import Any

from jobring.core.workflow import (
    FinishRun,
    KillJob,
    MarkSucceeded,
    RerunFrom,
    RetryFailed,
    RunStatus,
    StartJob,
    StopRun,
)
from tests.core.workflow_kit import Driver, chain, finish_of, kills, starts

# a -> b -> d, a -> c -> d
DIAMOND: dict[str, Any] = {
    "nodes": [{"key": k, "job_id": i + 1, "retries": 1} for i, k in enumerate("abcd")],
    "edges": [{"from": "a", "to": "b"}, {"from": "a", "to": "c"}, {"from": "b", "to": "d"},
              {"from": "c", "to": "d"}],
}


def failed_diamond() -> Driver:
    """``a`` succeeded, ``b`` failed twice (rule stop) while ``c`` ran: the run failed."""
    d = Driver(DIAMOND)
    d.ok("a")
    d.dispatched("c", 30)
    d.fail("b")
    d.fail("b")
    assert d.state.status is RunStatus.FAILED
    assert d.statuses() == {"a": "success", "b": "failed", "c": "stopped", "d": "stopped"}
    return d


def test_stop_kills_running_nodes_and_stops_the_rest() -> None:
    d = Driver(DIAMOND)
    d.ok("a")
    d.dispatched("b", 20)
    step = d.send(StopRun(d.tick(), round=0))
    assert [c for c in step.commands if isinstance(c, KillJob)] == [KillJob("b", 1, None, 20),
                                                                    KillJob("c", 1, None, None)]
    assert finish_of(step) == FinishRun(RunStatus.STOPPED, "stopped by a user", 1)
    assert d.statuses() == {"a": "success", "b": "stopped", "c": "stopped", "d": "stopped"}
    assert d.state.round == 1 and d.state.message == "stopped by a user"
    assert d.send(StopRun(d.tick())).note == "the run is stopped, not running"
    assert d.ok("b").note is not None  # the killed run's late result


def test_retry_failed_keeps_successes_and_restores_the_retries() -> None:
    d = failed_diamond()
    step = d.send(RetryFailed(d.tick(), round=0))
    assert step.commands == (StartJob("b", 3, None, 2, None, None), StartJob("c", 2, None, 3, None, None))
    assert d.state.status is RunStatus.RUNNING and d.state.round == 1 and d.state.ended_ms is None
    assert d.node("a").attempt == 1 and d.status("a") == "success"
    assert starts(d.fail("b")) == ["b"]  # its retry budget counts from the repair
    d.ok("b")
    d.ok("c")
    assert finish_of(d.ok("d")) == FinishRun(RunStatus.SUCCESS, "", 1)


def test_repairs_for_another_round_or_state_are_refused() -> None:
    d = failed_diamond()
    assert d.send(RetryFailed(d.tick(), round=5)).note == \
        "the run is at round 0, not 5: reload it and try again"
    assert d.send(RetryFailed(d.tick(), round=0)).applied
    assert d.send(RetryFailed(d.tick(), round=0)).note is not None  # the same request again
    running = d.send(RetryFailed(d.tick()))
    assert running.note == "only a failed or stopped run can be retried; this one is running"
    assert d.send(RerunFrom("a", d.tick())).note == "the run is still running: stop it first"


def test_retry_of_a_fanout_runs_only_its_unsuccessful_items() -> None:
    doc = {"nodes": [{"key": "f", "kind": "fanout", "job_id": 1, "items": "xs", "parallelism": 3,
                      "on_failure": "skip_descendants"}, {"key": "g", "job_id": 2}],
           "edges": [{"from": "f", "to": "g"}]}
    d = Driver(doc, params={"xs": ["p", "q", "r"]})
    d.ok("f", 0)
    d.fail("f", 1)
    d.ok("f", 2)
    assert d.state.status is RunStatus.FAILED and d.status("g") == "skipped"
    step = d.send(RetryFailed(d.tick()))
    assert starts(step) == ["f#1"] and step.commands[0] == StartJob("f", 2, 1, 1, None, None)
    assert starts(d.ok("f", 1)) == ["g"]
    assert finish_of(d.ok("g")) == FinishRun(RunStatus.SUCCESS, "", 1)


def test_mark_succeeded_resumes_an_ended_run() -> None:
    d = failed_diamond()
    step = d.send(MarkSucceeded("b", d.tick(), round=0, note="fixed by hand"))
    assert starts(step) == ["c"] and d.state.status is RunStatus.RUNNING
    assert d.node("b").marked and d.node("b").message == "fixed by hand" and d.status("b") == "success"
    assert starts(d.ok("c")) == ["d"]
    assert finish_of(d.ok("d")) == FinishRun(RunStatus.SUCCESS, "", 1)
    assert d.send(MarkSucceeded("b", d.tick())).note == \
        "node 'b' is success; only a failed or stopped node can be marked"


def test_mark_succeeded_in_a_running_run_unskips_the_descendants() -> None:
    doc = chain("a", "b", "c", a={"on_failure": "skip_descendants"})
    doc["nodes"].append({"key": "side", "job_id": 9})
    doc["edges"].append({"from": "side", "to": "c", })
    doc["nodes"][2]["join"] = "any_success"
    d = Driver(doc)
    d.fail("a")
    assert d.status("b") == "skipped" and d.state.status is RunStatus.RUNNING
    step = d.send(MarkSucceeded("a", d.tick()))
    assert starts(step) == ["b"] and d.state.round == 1
    d.ok("b")
    d.ok("side")
    assert finish_of(d.ok("c")) == FinishRun(RunStatus.SUCCESS, "", 1)


def test_a_decision_cannot_be_marked() -> None:
    doc = {"nodes": [{"key": "d", "kind": "decision"}, {"key": "x", "job_id": 1}],
           "edges": [{"from": "d", "to": "x", "when": "missing > 1"}]}
    d = Driver(doc)
    assert d.status("d") == "failed"
    assert "cannot be marked" in (d.send(MarkSucceeded("d", d.tick())).note or "")
    assert d.send(MarkSucceeded("nope", d.tick())).note == "no node 'nope' in this workflow"


def test_rerun_from_a_node_reruns_it_and_its_descendants_only() -> None:
    d = Driver(DIAMOND)
    for key in "abcd":
        d.ok(key)
    assert d.state.status is RunStatus.SUCCESS
    step = d.send(RerunFrom("b", d.tick(), round=0))
    assert step.commands == (StartJob("b", 2, None, 2, None, None),)
    assert d.status("d") == "waiting" and d.status("c") == "success" and d.node("c").attempt == 1
    starts_d = d.ok("b")
    assert starts(starts_d) == ["d"] and d.node("d").attempt == 2
    assert finish_of(d.ok("d")) == FinishRun(RunStatus.SUCCESS, "", 1)


def test_rerun_from_a_node_whose_parent_failed_runs_it_anyway() -> None:
    d = failed_diamond()
    assert starts(d.send(RerunFrom("d", d.tick()))) == ["d"]
    step = d.ok("d")
    assert finish_of(step) == FinishRun(RunStatus.FAILED, "node 'b' did not succeed", 1)
    assert kills(step) == []
