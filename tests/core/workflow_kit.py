"""A driver for the workflow engine in tests: feeds events, checks every step's invariants."""

from __future__ import annotations

import json
from collections.abc import Mapping
from itertools import pairwise
from typing import Any

from jobring.core.workflow import (
    Command,
    Event,
    FinishRun,
    KillJob,
    NodeDispatched,
    NodeFinished,
    NodeRun,
    NodeTimedOut,
    Outcome,
    RunStarted,
    StartJob,
    StartSubworkflow,
    Step,
    StopSubworkflow,
    Unit,
    WorkflowRun,
    apply,
    parse_workflow,
    run_from_json,
    run_to_json,
)


def chain(*keys: str, **node_fields: Any) -> dict[str, Any]:
    """A workflow ``keys[0] -> keys[1] -> ...`` of job nodes (job id = position + 1)."""
    nodes = [{"key": k, "job_id": i + 1, **node_fields.get(k, {})} for i, k in enumerate(keys)]
    return {"nodes": nodes, "edges": [{"from": a, "to": b} for a, b in pairwise(keys)]}


class Driver:
    """Applies events like an integrator would, asserting after each step that start commands
    are never repeated, that the run survives its JSON form, and that ignored events change
    nothing."""

    def __init__(self, doc: Mapping[str, Any], *, params: Mapping[str, Any] | None = None,
                 retries: Mapping[str, int] | None = None, start: bool = True) -> None:
        self.graph = parse_workflow(doc)
        self.run: WorkflowRun | None = None
        self.now = 1_000
        self.commands: list[Command] = []
        self.started: set[tuple[str, int, int]] = set()
        self.finished_rounds: set[int] = set()
        if start:
            self.send(RunStarted(self.now, version=3, params=dict(params or {}), retries=dict(retries or {})))

    def tick(self) -> int:
        self.now += 1
        return self.now

    def send(self, event: Event) -> Step:
        before = self.run
        step = apply(self.graph, self.run, event)
        if not step.applied:
            assert step.run is before and step.commands == ()
        for command in step.commands:
            if isinstance(command, StartJob | StartSubworkflow):
                assert command.key not in self.started, f"started twice: {command.key}"
                self.started.add(command.key)
            if isinstance(command, FinishRun):
                assert command.round not in self.finished_rounds
                self.finished_rounds.add(command.round)
        if step.run is not None:
            stored = json.loads(json.dumps(run_to_json(step.run)))
            assert run_to_json(run_from_json(stored)) == stored
        self.run = step.run
        self.commands.extend(step.commands)
        return step

    # -- reading ---------------------------------------------------------------------------------

    @property
    def state(self) -> WorkflowRun:
        assert self.run is not None
        return self.run

    def node(self, key: str) -> NodeRun:
        return self.state.node(key)

    def unit(self, key: str, item: int | None = None) -> Unit:
        record = self.node(key)
        if item is None:
            return record
        assert record.items is not None
        return record.items[item]

    def status(self, key: str, item: int | None = None) -> str:
        return self.unit(key, item).status.value

    def statuses(self) -> dict[str, str]:
        return {key: self.status(key) for key in self.graph.nodes}

    # -- results -----------------------------------------------------------------------------------

    def dispatched(self, key: str, run_id: int, item: int | None = None) -> Step:
        return self.send(NodeDispatched(key, self.unit(key, item).attempt, run_id, self.tick(), item))

    def ok(self, key: str, item: int | None = None, *, message: str = "",
           context: Mapping[str, Any] | None = None) -> Step:
        attempt = self.unit(key, item).attempt
        return self.send(NodeFinished(key, attempt, Outcome.SUCCESS, self.tick(), item, message=message,
                                      context=context))

    def fail(self, key: str, item: int | None = None, *, outcome: Outcome = Outcome.FAILED,
             message: str = "boom") -> Step:
        attempt = self.unit(key, item).attempt
        return self.send(NodeFinished(key, attempt, outcome, self.tick(), item, message=message))

    def timed_out(self, key: str, item: int | None = None) -> Step:
        return self.send(NodeTimedOut(key, self.unit(key, item).attempt, self.tick(), item))


def _labels(step: Step, kinds: tuple[type, ...]) -> list[str]:
    """``node`` or ``node#item`` of each command of these kinds."""
    labels = []
    for command in step.commands:
        if isinstance(command, kinds):
            item = getattr(command, "item", None)
            labels.append(command.node if item is None else f"{command.node}#{item}")
    return labels


def starts(step: Step) -> list[str]:
    return _labels(step, (StartJob, StartSubworkflow))


def kills(step: Step) -> list[str]:
    return _labels(step, (KillJob, StopSubworkflow))


def finish_of(step: Step) -> FinishRun | None:
    found = [c for c in step.commands if isinstance(c, FinishRun)]
    assert len(found) <= 1
    return found[0] if found else None
