"""The store-backed checks through callbacks: jobs, groups, sub-workflows."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import pytest

from jobring.core.workflow import (
    JobRef,
    WorkflowGraph,
    WorkflowInvalid,
    check_access,
    inherited_retries,
    parse_workflow,
)
from jobring.core.workflow.model import MAX_NESTING

JOBS = {1: JobRef(1, group_id=10, retries=3), 2: JobRef(2, group_id=20), 3: JobRef(3, group_id=30, retries=1)}
ALLOWED_GROUPS = {10, 20}


def job_graph(*job_ids: int, sub: tuple[int, ...] = ()) -> WorkflowGraph:
    nodes = [{"key": f"j{i}", "job_id": job_id} for i, job_id in enumerate(job_ids)]
    nodes += [{"key": f"s{i}", "kind": "subworkflow", "workflow_id": w} for i, w in enumerate(sub)]
    keys = [n["key"] for n in nodes]
    return parse_workflow({"nodes": nodes, "edges": [{"from": a, "to": b} for a, b in pairwise(keys)]})


class Store:
    def __init__(self, workflows: dict[int, WorkflowGraph]) -> None:
        self.workflows = workflows
        self.calls: Counter[str] = Counter()

    def job(self, job_id: int) -> JobRef | None:
        self.calls[f"job {job_id}"] += 1
        return JOBS.get(job_id)

    def may_operate(self, group_id: int) -> bool:
        self.calls[f"group {group_id}"] += 1
        return group_id in ALLOWED_GROUPS

    def workflow(self, workflow_id: int) -> WorkflowGraph | None:
        self.calls[f"workflow {workflow_id}"] += 1
        return self.workflows.get(workflow_id)

    def check(self, graph: WorkflowGraph, workflow_id: int | None = None) -> None:
        check_access(graph, job_lookup=self.job, may_operate=self.may_operate, workflow_lookup=self.workflow,
                     workflow_id=workflow_id)


def refusal(store: Store, graph: WorkflowGraph, workflow_id: int | None = None) -> WorkflowInvalid:
    with pytest.raises(WorkflowInvalid) as caught:
        store.check(graph, workflow_id)
    return caught.value


def test_allowed_jobs_pass_and_each_is_looked_up_once() -> None:
    store = Store({})
    store.check(job_graph(1, 2, 1, 2))
    assert store.calls == Counter({"job 1": 1, "job 2": 1, "group 10": 1, "group 20": 1})


def test_unknown_job_and_forbidden_group_name_the_node() -> None:
    store = Store({})
    error = refusal(store, job_graph(1, 99))
    assert (error.field, error.node) == ("nodes[1].job_id", "j1")
    missing = error.message
    assert missing == "job 99 does not exist or is in a group you may not operate"
    error = refusal(store, job_graph(1, 2, 3))
    assert (error.field, error.node) == ("nodes[2].job_id", "j2")
    # The same refusal as for a missing job, naming no group: it tells nothing of other groups.
    assert error.message == missing.replace("99", "3")
    assert "30" not in error.message


def test_jobs_outside_the_owning_group_are_refused_even_when_operable() -> None:
    store = Store({})
    check_access(job_graph(1, 1), job_lookup=store.job, may_operate=store.may_operate,
                 workflow_lookup=store.workflow, owner_group=10)
    with pytest.raises(WorkflowInvalid) as caught:
        check_access(job_graph(1, 2), job_lookup=store.job, may_operate=lambda _: True,
                     workflow_lookup=store.workflow, owner_group=10)
    assert (caught.value.field, caught.value.node) == ("nodes[1].job_id", "j1")
    assert "not in this workflow's group 10" in caught.value.message
    assert store.calls["job 2"] == 1  # still looked up once


def test_fanout_jobs_are_checked() -> None:
    graph = parse_workflow({"nodes": [{"key": "f", "kind": "fanout", "job_id": 3, "items": "x",
                                       "parallelism": 1}]})
    assert refusal(Store({}), graph).node == "f"


def test_sub_workflows() -> None:
    leaf = job_graph(1)
    store = Store({5: leaf, 6: job_graph(2, sub=(5,)), 7: job_graph(3), 8: job_graph(1, sub=(7,))})
    store.check(job_graph(1, sub=(6, 5)), workflow_id=100)
    assert store.calls["workflow 5"] == 1  # referenced twice, looked at once

    error = refusal(store, job_graph(1, sub=(42,)))
    assert (error.field, error.node) == ("nodes[1].workflow_id", "s0")
    assert "workflow 42 does not exist" in error.message

    error = refusal(store, job_graph(1, sub=(8,)))
    assert error.node == "s0"
    assert error.message == ("workflow 8 -> workflow 7 runs node 'j0': job 3 does not exist "
                             "or is in a group you may not operate")


def test_sub_workflows_may_not_recurse() -> None:
    store = Store({5: job_graph(1, sub=(6,)), 6: job_graph(2, sub=(100,))})
    error = refusal(store, job_graph(1, sub=(5,)), workflow_id=100)
    assert error.node == "s0"
    assert error.message == ("sub-workflows may not recurse: workflow 5 -> workflow 6 -> workflow 100 "
                             "is this workflow")
    assert "is this workflow" in refusal(Store({}), job_graph(1, sub=(100,)), workflow_id=100).message

    loop = Store({5: job_graph(1, sub=(6,)), 6: job_graph(2, sub=(5,))})
    error = refusal(loop, job_graph(1, sub=(5,)), workflow_id=None)
    assert "sub-workflows may not recurse: workflow 5 -> workflow 6 -> workflow 5" in error.message


def test_nesting_is_capped() -> None:
    chain = {i: job_graph(1, sub=(i + 1,)) for i in range(1, MAX_NESTING + 2)}
    chain[MAX_NESTING + 2] = job_graph(1)
    Store(chain).check(job_graph(1, sub=(3,)))  # 3 -> ... -> MAX_NESTING + 2: MAX_NESTING levels
    error = refusal(Store(chain), job_graph(1, sub=(2,)))  # one level more
    assert f"nest more than {MAX_NESTING} deep" in error.message and error.node == "s0"


def test_inherited_retries() -> None:
    graph = parse_workflow({"nodes": [{"key": "a", "job_id": 1}, {"key": "b", "job_id": 1, "retries": 0},
                                      {"key": "c", "job_id": 2}, {"key": "d", "job_id": 3},
                                      {"key": "e", "job_id": 99}],
                            "edges": [{"from": "a", "to": k} for k in "bcde"]})
    assert inherited_retries(graph, JOBS.get) == {"a": 3, "d": 1}
