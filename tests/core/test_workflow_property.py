"""Property tests: random graphs, random outcomes, events duplicated and reordered.

The engine's result is checked against a reference evaluator written straight from the rules
of docs/workflows.md (node by node in topological order, no events): without a fatal failure
(rule ``stop``) every node must end exactly as the reference says; with one, the run fails and
every node ends as the reference says or stopped. Along the way: no start command twice, every
node final at the end, duplicates ignored, the input run never mutated, and repairs keep what
succeeded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobring.core.workflow import (
    KillJob,
    MarkSucceeded,
    NodeDispatched,
    NodeFinished,
    NodeTimedOut,
    Outcome,
    RetryFailed,
    RunStatus,
    StartJob,
    StopRun,
    StopSubworkflow,
    apply,
    run_to_json,
)
from tests.core.workflow_kit import Driver

PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
OUTCOMES = [Outcome.SUCCESS, Outcome.SUCCESS, Outcome.FAILED, Outcome.TIMED_OUT, Outcome.KILLED]


@dataclass
class Case:
    doc: dict[str, Any]
    params: dict[str, Any]
    outcomes: dict[tuple[str, int], list[Outcome]] = field(default_factory=dict)

    def outcome(self, node: str, item: int, attempt: int) -> Outcome:
        planned = self.outcomes.get((node, item), [])
        return planned[attempt - 1] if attempt <= len(planned) else Outcome.SUCCESS


@st.composite
def cases(draw: st.DrawFn, repairs: bool = False) -> Case:
    count = draw(st.integers(2, 9))
    keys = [f"n{i}" for i in range(count)]
    edges: set[tuple[int, int]] = set()
    for j in range(1, count):
        edges.add((draw(st.integers(0, j - 1)), j))
        for i in range(j - 1):
            if draw(st.integers(0, 4)) == 0:
                edges.add((i, j))
    children = {i: sorted(j for a, j in edges if a == i) for i in range(count)}
    rules = ["skip_descendants", "continue", "stop"]
    nodes: list[dict[str, Any]] = []
    params: dict[str, Any] = {}
    edge_docs: list[dict[str, Any]] = []
    for i, key in enumerate(keys):
        kind = draw(st.sampled_from(["job", "job", "decision", "decision", "fanout"]))
        if kind == "decision" and not children[i]:
            kind = "job"
        node: dict[str, Any] = {"key": key, "kind": kind, "join": draw(st.sampled_from(
            ["all_success", "any_success", "all_done"]))}
        if kind == "decision":
            node["on_failure"] = draw(st.sampled_from(["stop", "skip_descendants"]))
            with_else = draw(st.booleans())
            for n, j in enumerate(children[i]):
                if with_else and n == 0:
                    edge_docs.append({"from": key, "to": keys[j], "else": True})
                else:
                    flag = f"flag_{i}_{j}"
                    params[flag] = draw(st.booleans())
                    edge_docs.append({"from": key, "to": keys[j], "when": f"{flag} == true"})
        else:
            node.update(job_id=i + 1, retries=draw(st.integers(0, 2)),
                        on_failure=draw(st.sampled_from(rules)))
            edge_docs += [{"from": key, "to": keys[j]} for j in children[i]]
        if kind == "fanout":
            params[f"items_{i}"] = list(range(draw(st.integers(0, 3))))
            node.update(items=f"items_{i}", parallelism=draw(st.integers(1, 2)))
        nodes.append(node)
    case = Case({"nodes": nodes, "edges": edge_docs}, params)
    for node in nodes:
        if node["kind"] == "decision":
            continue
        for item in range(len(params.get(f"items_{nodes.index(node)}", [0]))):
            case.outcomes[(node["key"], item)] = draw(st.lists(st.sampled_from(OUTCOMES), max_size=3))
    return case


# -- the reference: the documented rules, node by node in topological order ------------------------


def reference(case: Case, driver: Driver) -> tuple[dict[str, str], bool]:
    """Each node's final status without the ``stop`` rule's early end, and whether some node
    fails under ``stop`` (a fatal failure)."""
    graph = driver.graph
    status: dict[str, str] = {}
    upstream_skip: set[str] = set()
    taken: dict[str, set[str]] = {}
    fatal = False
    for key in graph.order:
        node = graph.nodes[key]
        signals = []
        for parent in graph.parents[key]:
            rule = graph.nodes[parent].on_failure.value
            if status[parent] == "success":
                signals.append("ok" if parent not in taken or key in taken[parent] else "no")
            elif status[parent] == "failed":
                signals.append("ok" if rule == "continue" else "bad")
            else:
                signals.append("bad" if parent in upstream_skip else "no")
        join = node.join.value
        if not signals:
            runs = True
        elif all(s == "no" for s in signals):
            runs = False
        elif join == "all_success":
            runs = "bad" not in signals
        elif join == "any_success":
            runs = "ok" in signals
        else:
            runs = True
        if not runs:
            status[key] = "skipped"
            if any(s != "no" for s in signals):
                upstream_skip.add(key)
            continue
        if node.kind.value == "decision":
            chosen = {e.target for e in graph.children[key] if e.when is not None and case.params[
                e.when.source.split(" ")[0]]}
            taken[key] = chosen or {e.target for e in graph.children[key] if e.otherwise}
            status[key] = "success"
            continue
        items = len(case.params[node.items.source]) if node.items is not None else 1
        retries = node.retries or 0
        ok = all(_unit_succeeds(case, key, item, retries) for item in range(items))
        status[key] = "success" if ok else "failed"
        fatal = fatal or (not ok and node.on_failure.value == "stop")
    return status, fatal


def _unit_succeeds(case: Case, key: str, item: int, retries: int) -> bool:
    for attempt in range(1, retries + 2):
        outcome = case.outcome(key, item, attempt)
        if outcome is Outcome.SUCCESS:
            return True
        if outcome is Outcome.KILLED:
            return False
    return False


# -- driving the engine like a cluster of admins would ---------------------------------------------


def drive(case: Case, driver: Driver, data: st.DataObject, *, allow_stop: bool = False,
          since: int = 0) -> None:
    """Deliver results in a random order, with duplicates and results before dispatches, until
    the run ends; kills drop their runs (whose late results are delivered anyway)."""
    in_flight: dict[tuple[str, int, int], StartJob | None] = {}
    delivered: list[Any] = []
    seen = since
    for _ in range(500):
        for command in driver.commands[seen:]:
            if isinstance(command, StartJob):
                in_flight[command.key] = command
            elif isinstance(command, KillJob | StopSubworkflow):
                in_flight.pop(command.key, None)
        seen = len(driver.commands)
        if driver.state.status is not RunStatus.RUNNING:
            break
        assert in_flight, "a running run with nothing in flight"
        choice = data.draw(st.integers(0, 9))
        if allow_stop and choice == 0:
            send(driver, StopRun(driver.tick()))
            continue
        if choice == 1 and delivered:
            duplicate = delivered[data.draw(st.integers(0, len(delivered) - 1))]
            assert not driver.send(duplicate).applied
            continue
        key = sorted(in_flight)[data.draw(st.integers(0, len(in_flight) - 1))]
        node, attempt, item_key = key
        item = None if item_key < 0 else item_key
        if choice == 2:
            event: Any = NodeDispatched(node, attempt, 10_000 + len(delivered), driver.tick(), item)
        else:
            outcome = case.outcome(node, max(item_key, 0), attempt)
            if outcome is Outcome.TIMED_OUT and data.draw(st.booleans()):
                event = NodeTimedOut(node, attempt, driver.tick(), item)
            else:
                event = NodeFinished(node, attempt, outcome, driver.tick(), item)
            in_flight.pop(key)
        send(driver, event)
        delivered.append(event)
    assert driver.state.status is not RunStatus.RUNNING


def send(driver: Driver, event: Any) -> None:
    before = driver.run
    frozen = json.dumps(run_to_json(before)) if before is not None else None
    step = driver.send(event)
    if before is not None:
        assert json.dumps(run_to_json(before)) == frozen, "apply mutated its input"
    if step.applied:
        again = apply(driver.graph, step.run, event)
        assert not again.applied and again.commands == ()


def assert_all_final(driver: Driver) -> None:
    for key in driver.graph.nodes:
        record = driver.node(key)
        assert record.status.is_final, (key, record)
        for item in record.items or ():
            assert item.status.is_final or item.status.value == "waiting" and record.status.value != "running"


@PROPERTY
@given(cases(), st.data())
def test_random_runs_follow_the_reference(case: Case, data: st.DataObject) -> None:
    driver = Driver(case.doc, params=case.params)
    drive(case, driver, data)
    assert_all_final(driver)
    expected, fatal = reference(case, driver)
    got = driver.statuses()
    if not fatal:
        assert got == expected
        failed = any(got[k] == "failed" and driver.graph.nodes[k].on_failure.value != "continue" for k in got)
        assert driver.state.status is (RunStatus.FAILED if failed else RunStatus.SUCCESS)
    else:
        assert driver.state.status is RunStatus.FAILED
        assert all(got[k] in (expected[k], "stopped") for k in got), (got, expected)


@PROPERTY
@given(cases(repairs=True), st.data())
def test_repairs_keep_what_succeeded(case: Case, data: st.DataObject) -> None:
    driver = Driver(case.doc, params=case.params)
    drive(case, driver, data, allow_stop=True)
    for _ in range(3):
        assert_all_final(driver)
        if driver.state.status is RunStatus.SUCCESS:
            break
        kept = {k: driver.node(k).attempt for k in driver.graph.nodes if driver.status(k) == "success"}
        kept_items = {(k, i): item.attempt for k in driver.graph.nodes
                      for i, item in enumerate(driver.node(k).items or ()) if item.status.value == "success"}
        failed = [k for k in driver.graph.nodes if driver.status(k) in ("failed", "stopped")
                  and driver.graph.nodes[k].kind.value != "decision"]
        round_before = driver.state.round
        since = len(driver.commands)
        if failed and data.draw(st.booleans()):
            send(driver, MarkSucceeded(failed[0], driver.tick(), round=round_before))
            kept[failed[0]] = driver.node(failed[0]).attempt
        else:
            send(driver, RetryFailed(driver.tick(), round=round_before))
        assert driver.state.round == round_before + 1
        drive(case, driver, data, since=since)
        for key, attempt in kept.items():
            assert driver.status(key) == "success" and driver.node(key).attempt == attempt, key
        for (key, index), attempt in kept_items.items():
            item = driver.unit(key, index)
            assert item.status.value == "success" and item.attempt == attempt, (key, index)
