"""The workflow engine, scenario by scenario: runs, joins, failure rules, decisions, data, retries."""

from __future__ import annotations

from typing import Any

import pytest

from jobring.core.workflow import (
    FinishRun,
    KillJob,
    NodeDispatched,
    NodeFinished,
    Outcome,
    RunStarted,
    RunStatus,
    StartJob,
    apply,
)
from tests.core.workflow_kit import Driver, chain, finish_of, kills, starts


def test_a_chain_runs_in_order_and_records_each_node() -> None:
    d = Driver(chain("a", "b", "c"))
    assert d.commands == [StartJob("a", 1, None, 1, None, None)]
    assert d.status("a") == "running" and d.status("b") == "waiting"
    d.dispatched("a", 501)
    assert starts(d.ok("a", message="done")) == ["b"]
    assert (d.node("a").run_id, d.node("a").message, d.node("a").started_ms) == (501, "done", 1_000)
    assert d.node("a").duration_ms == 2
    d.ok("b")
    last = d.ok("c")
    assert finish_of(last) == FinishRun(RunStatus.SUCCESS, "", 0)
    assert d.state.status is RunStatus.SUCCESS and d.state.ended_ms == d.now and d.state.version == 3
    assert d.statuses() == {"a": "success", "b": "success", "c": "success"}


def test_roots_start_together_and_the_join_waits_for_all() -> None:
    doc = {"nodes": [{"key": k, "job_id": 1} for k in ("x", "y", "z")],
           "edges": [{"from": "x", "to": "z"}, {"from": "y", "to": "z"}]}
    d = Driver(doc)
    assert [c.node for c in d.commands if isinstance(c, StartJob)] == ["x", "y"]
    assert starts(d.ok("x")) == []
    assert starts(d.ok("y")) == ["z"]


def test_duplicated_late_and_foreign_events_change_nothing() -> None:
    d = Driver(chain("a", "b"))
    first = d.dispatched("a", 7)
    assert first.applied
    assert d.send(NodeDispatched("a", 1, 7, d.tick())).note == "run id already recorded"
    step = d.ok("a")
    again = d.send(NodeFinished("a", 1, Outcome.SUCCESS, d.tick()))
    assert again.note == "attempt 1 of 'a' has already ended" and again.run is step.run
    assert d.send(NodeFinished("a", 2, Outcome.FAILED, d.tick())).note == "attempt 2 of 'a' is not current"
    assert d.send(NodeFinished("b", 1, Outcome.SUCCESS, d.tick(), item=0)).note is not None
    ghost = d.send(NodeFinished("ghost", 1, Outcome.SUCCESS, d.tick()))
    assert ghost.note == "no node 'ghost' in this workflow"
    assert d.send(RunStarted(d.tick(), 3)).note == "the run has already started"
    assert apply(d.graph, None, NodeFinished("a", 1, Outcome.SUCCESS, 0)).note == "the run has not started"
    assert starts(d.ok("b")) == [] and d.state.status is RunStatus.SUCCESS


def test_a_result_may_come_before_its_dispatch() -> None:
    d = Driver(chain("a", "b"))
    d.send(NodeFinished("a", 1, Outcome.SUCCESS, d.tick(), run_id=77))
    assert d.node("a").run_id == 77 and d.status("b") == "running"
    assert d.send(NodeDispatched("a", 1, 77, d.tick())).note == "run id already recorded"


def test_context_flows_into_params_and_decisions() -> None:
    doc = chain("extract", "load", load={"params": "--rows={{ rows }} --day={{ day }} {{ ctx.rows > 10 }}"})
    d = Driver(doc, params={"day": "2026-03-01"})
    step = d.ok("extract", context={"rows": 1234})
    assert step.commands == (StartJob("load", 1, None, 2, "--rows=1234 --day=2026-03-01 true", None),)
    assert d.state.context == {"day": "2026-03-01", "rows": 1234}


def test_result_json_reads_an_xxl_job_handler_message() -> None:
    doc = chain("a", "b", "c", a={"result_json": True}, b={"result_json": True})
    d = Driver(doc)
    d.ok("a", message='{"rows": 5, "files": ["x"]}')
    assert d.state.context == {"rows": 5, "files": ["x"]}
    d.ok("b", message="processed 5 rows")
    assert d.status("b") == "success"
    assert "result message is not JSON" in d.node("b").message
    assert d.state.context == {"rows": 5, "files": ["x"]}


def test_a_failed_attempt_adds_nothing_and_last_writer_wins() -> None:
    doc = {"nodes": [{"key": k, "job_id": 1, "retries": 1} for k in ("p", "q", "r")],
           "edges": [{"from": "p", "to": "r"}, {"from": "q", "to": "r"}]}
    d = Driver(doc)
    d.send(NodeFinished("p", 1, Outcome.FAILED, d.tick(), context={"k": "from failed p"}))
    assert "k" not in d.state.context
    d.ok("q", context={"k": "q"})
    d.ok("p", context={"k": "p"})
    assert d.state.context["k"] == "p"


def test_a_context_over_the_cap_fails_the_attempt() -> None:
    d = Driver(chain("a", "b", a={"retries": 1}))
    d.ok("a", context={"blob": "x" * 70_000})
    assert d.status("a") == "running" and d.node("a").attempt == 2
    assert "over the cap" in d.node("a").message
    d.ok("a", context={"blob": "small"})
    assert d.status("b") == "running"


def test_params_that_do_not_render_fail_the_node_without_firing() -> None:
    d = Driver(chain("a", "b", b={"params": "{{ missing }}", "retries": 3, "on_failure": "skip_descendants"}))
    step = d.ok("a")
    assert starts(step) == []
    assert d.status("b") == "failed" and "variable 'missing' does not exist" in d.node("b").message
    assert d.state.status is RunStatus.FAILED


def test_retries_count_attempts() -> None:
    d = Driver(chain("a", "b", a={"retries": 2}))
    assert starts(d.fail("a")) == ["a"]
    assert d.node("a").attempt == 2 and d.node("a").message == "attempt 1 failed: boom"
    assert d.commands[-1] == StartJob("a", 2, None, 1, None, None)
    d.timed_out("a")
    assert d.node("a").attempt == 3 and isinstance(d.commands[-2], KillJob)
    step = d.fail("a")
    assert d.status("a") == "failed" and d.node("a").attempt == 3
    assert finish_of(step) is not None and d.state.status is RunStatus.FAILED
    assert d.statuses() == {"a": "failed", "b": "stopped"}
    assert d.state.message.startswith("node 'a' failed: attempt 3 failed: boom")


def test_inherited_retries_and_no_retry_after_a_kill() -> None:
    d = Driver(chain("a", "b"), retries={"a": 1, "b": 5})
    d.fail("a")
    assert d.node("a").attempt == 2
    d.ok("a")
    d.fail("b", outcome=Outcome.KILLED, message="killed by user")
    assert d.status("b") == "failed" and d.node("b").attempt == 1


def test_a_timeout_kills_the_run_and_its_late_result_is_ignored() -> None:
    d = Driver(chain("a", "b", a={"retries": 1, "timeout_s": 30}))
    assert d.commands[0] == StartJob("a", 1, None, 1, None, 30)
    d.dispatched("a", 11)
    step = d.timed_out("a")
    assert step.commands[0] == KillJob("a", 1, None, 11)
    assert starts(step) == ["a"] and "no result by the deadline" in d.node("a").message
    assert d.send(NodeFinished("a", 1, Outcome.SUCCESS, d.tick())).note is not None
    assert d.status("a") == "running" and d.node("a").attempt == 2


FAILING_TOP: dict[str, Any] = {
    "nodes": [{"key": "bad", "job_id": 1}, {"key": "slow", "job_id": 2}, {"key": "after_bad", "job_id": 3},
              {"key": "after_slow", "job_id": 4}, {"key": "join", "job_id": 5}],
    "edges": [{"from": "bad", "to": "after_bad"}, {"from": "slow", "to": "after_slow"},
              {"from": "after_bad", "to": "join"}, {"from": "after_slow", "to": "join"}],
}


def failing(rule: str, join: str = "all_success") -> Driver:
    doc: dict[str, Any] = {**FAILING_TOP, "nodes": [dict(n) for n in FAILING_TOP["nodes"]]}
    doc["nodes"][0]["on_failure"] = rule
    doc["nodes"][4]["join"] = join
    return Driver(doc)


def test_failure_rule_stop_kills_and_stops_everything() -> None:
    d = failing("stop")
    d.dispatched("slow", 42)
    step = d.fail("bad")
    assert kills(step) == ["slow"] and step.commands[0] == KillJob("slow", 1, None, 42)
    assert finish_of(step) == FinishRun(RunStatus.FAILED, "node 'bad' failed: attempt 1 failed: boom", 0)
    assert d.statuses() == {"bad": "failed", "slow": "stopped", "after_bad": "stopped",
                            "after_slow": "stopped", "join": "stopped"}
    assert d.fail("slow").note is not None  # the killed run's own result changes nothing


def test_failure_rule_skip_descendants_lets_other_branches_finish() -> None:
    d = failing("skip_descendants")
    step = d.fail("bad")
    assert d.status("after_bad") == "skipped"
    assert d.node("after_bad").message == "skipped: a node above failed"
    assert d.status("join") == "skipped" and finish_of(step) is None
    d.ok("slow")
    last = d.ok("after_slow")
    assert finish_of(last) == FinishRun(RunStatus.FAILED, "node 'bad' did not succeed", 0)


def test_failure_rule_continue_runs_descendants_as_if_it_succeeded() -> None:
    d = failing("continue")
    assert starts(d.fail("bad")) == ["after_bad"]
    for key in ("slow", "after_bad", "after_slow"):
        d.ok(key)
    d.ok("join")
    assert d.status("bad") == "failed" and d.state.status is RunStatus.SUCCESS


@pytest.mark.parametrize(("join", "runs"), [("all_success", False), ("any_success", True),
                                           ("all_done", True)])
def test_joins_after_a_skipped_branch(join: str, runs: bool) -> None:
    d = failing("skip_descendants", join)
    d.fail("bad")
    d.ok("slow")
    step = d.ok("after_slow")
    assert (starts(step) == ["join"]) is runs
    assert d.status("join") == ("running" if runs else "skipped")


def test_any_success_starts_on_the_first_parent() -> None:
    d = failing("stop", "any_success")
    d.ok("slow")
    assert starts(d.ok("after_slow")) == ["join"]
    assert d.status("after_bad") == "waiting"


def test_all_done_runs_a_clean_up_after_a_failure_above() -> None:
    doc = chain("a", "b", "cleanup", a={"on_failure": "skip_descendants"}, cleanup={"join": "all_done"})
    d = Driver(doc)
    step = d.fail("a")
    assert d.status("b") == "skipped" and starts(step) == ["cleanup"]
    assert finish_of(d.ok("cleanup")) == FinishRun(RunStatus.FAILED, "node 'a' did not succeed", 0)


DECISION: dict[str, Any] = {
    "nodes": [{"key": "count", "job_id": 1}, {"key": "route", "kind": "decision"},
              {"key": "big", "job_id": 2}, {"key": "big2", "job_id": 3}, {"key": "eu", "job_id": 4},
              {"key": "small", "job_id": 5}, {"key": "report", "job_id": 6}],
    "edges": [{"from": "count", "to": "route"},
              {"from": "route", "to": "big", "when": "rows > 1000"}, {"from": "big", "to": "big2"},
              {"from": "route", "to": "eu", "when": 'region == "eu"'},
              {"from": "route", "to": "small", "else": True},
              {"from": "big2", "to": "report"}, {"from": "eu", "to": "report"},
              {"from": "small", "to": "report"}],
}


@pytest.mark.parametrize(("context", "taken"), [
    ({"rows": 5000, "region": "us"}, ["big"]),
    ({"rows": 5000, "region": "eu"}, ["big", "eu"]),
    ({"rows": 5, "region": "us"}, ["small"]),
])
def test_decisions_take_every_edge_whose_condition_holds_else_the_else_edge(
        context: dict[str, Any], taken: list[str]) -> None:
    d = Driver(DECISION)
    step = d.ok("count", context=context)
    assert starts(step) == taken
    assert d.node("route").taken == tuple(taken) and d.status("route") == "success"
    for key in ("big", "eu", "small"):
        if key not in taken:
            assert d.status(key) == "skipped" and d.node(key).message == "branch not taken"
    if "big" not in taken:
        assert d.status("big2") == "skipped"
    for key in taken:
        d.ok(key)
    if "big" in taken:
        assert d.status("report") == "waiting"
        d.ok("big2")
    assert d.status("report") == "running"
    assert finish_of(d.ok("report")) == FinishRun(RunStatus.SUCCESS, "", 0)


def test_a_decision_that_takes_no_edge_skips_everything_below() -> None:
    doc = {"nodes": [{"key": "d", "kind": "decision"}, {"key": "x", "job_id": 1}, {"key": "y", "job_id": 1}],
           "edges": [{"from": "d", "to": "x", "when": "false"}, {"from": "x", "to": "y"}]}
    d = Driver(doc)
    assert d.state.status is RunStatus.SUCCESS and d.statuses() == {"d": "success", "x": "skipped",
                                                                    "y": "skipped"}
    assert isinstance(d.commands[-1], FinishRun)


def test_a_decision_error_is_the_decision_node_failing() -> None:
    d = Driver(DECISION)
    d.ok("count", context={"rows": "many", "region": "eu"})
    assert d.status("route") == "failed" and d.state.status is RunStatus.FAILED
    expected = "condition of the edge to 'big': column 6: cannot order a string and a number"
    assert expected in d.node("route").message
