"""Workflow graphs: validation of 1,000-node graphs, and the engine's step at that size.

Run: .venv/bin/python bench/workflow_validate.py [--repeats R]

Validation rows time ``parse_workflow`` (JSON object -> checked graph: fields, keys, edges,
decisions, templates, cycles, connectivity) and ``check_access`` (with in-memory lookups) on:

* wide: one root, 998 nodes in parallel, one sink joining them (1,996 edges);
* deep: a chain of 1,000 nodes;
* mixed: 1,000 nodes, ~3 edges each to later nodes, decisions with conditions, fan-outs,
  templated params (a heavy realistic graph).

Engine rows time what an admin does when a callback arrives for a run of such a graph: read the
stored run (``json.loads`` + ``run_from_json``), ``apply`` the event, write it back
(``run_to_json`` + ``json.dumps``): for the last parent of the wide graph's sink (the event that
starts the sink), a node in the middle of the deep chain, an item of a 1,000-item fan-out, and
the largest run the limits allow (1,000 nodes, 10 fan-outs of 1,000 items: ``MAX_RUN_ITEMS``,
every finished node and item with a message of the full 500 characters).

Loop rows: the longest the event loop went without running (a 1 ms ticker's worst gap) while
that largest run's event is applied 20 times, inline and in a worker thread as the driver does.

Each row: the median and p99 over R runs (wall clock) and the median CPU time of this process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from jobring.core.workflow import (
    MAX_RUN_ITEMS,
    JobRef,
    NodeFinished,
    Outcome,
    RunStarted,
    WorkflowGraph,
    WorkflowRun,
    apply,
    check_access,
    check_run_budget,
    parse_workflow,
    run_from_json,
    run_to_json,
)

SIZE = 1_000


def wide() -> dict[str, Any]:
    keys = [f"n{i}" for i in range(SIZE)]
    middle = keys[1:-1]
    edges = [{"from": keys[0], "to": m} for m in middle] + [{"from": m, "to": keys[-1]} for m in middle]
    return {"nodes": [{"key": k, "job_id": 1 + i % 50} for i, k in enumerate(keys)], "edges": edges}


def deep() -> dict[str, Any]:
    keys = [f"n{i}" for i in range(SIZE)]
    return {"nodes": [{"key": k, "job_id": 1 + i % 50} for i, k in enumerate(keys)],
            "edges": [{"from": keys[i], "to": keys[i + 1]} for i in range(SIZE - 1)]}


def mixed() -> dict[str, Any]:
    rng = random.Random(21)
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    for i in range(SIZE):
        kind = rng.choice(["job"] * 6 + ["decision", "fanout"]) if i < SIZE - 4 else "job"
        node: dict[str, Any] = {"key": f"node_{i}", "kind": kind,
                                "join": rng.choice(["all_success", "any_success", "all_done"])}
        if kind != "decision":
            params = f"--day={{{{ day }}}} --n={{{{ rows_{i % 7} | default(0) }}}}"
            node.update(job_id=1 + i % 50, params=params,
                        on_failure=rng.choice(["stop", "skip_descendants", "continue"]), retries=i % 3)
        if kind == "fanout":
            node.update(items="files", parallelism=4)
        nodes.append(node)
        targets = sorted({rng.randrange(i + 1, SIZE) for _ in range(3)}) if i < SIZE - 1 else []
        for target in targets:
            edge: dict[str, Any] = {"from": node["key"], "to": f"node_{target}"}
            if kind == "decision":
                edge["when"] = f'ctx.rows_{target % 7} > {target} && region in ["eu", "us"]'
            edges.append(edge)
    return {"nodes": nodes, "edges": _connect(nodes, edges)}


def _connect(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give every node without a parent one (the first node), so the graph is connected."""
    has_parent = {e["to"] for e in edges}
    for node in nodes[1:]:
        if node["key"] not in has_parent:
            source = nodes[0]
            edge: dict[str, Any] = {"from": source["key"], "to": node["key"]}
            if source["kind"] == "decision":
                edge["when"] = "true"
            edges.append(edge)
    return edges


JOBS = {i: JobRef(i, group_id=i % 5, retries=1) for i in range(1, 51)}


def check(graph: WorkflowGraph) -> None:
    check_access(graph, job_lookup=JOBS.get, may_operate=lambda group: True, workflow_lookup=lambda w: None)


def timed(action: Callable[[], object], repeats: int) -> tuple[float, float, float]:
    """(median ms, p99 ms, median CPU ms)."""
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        action()
        walls.append((time.perf_counter() - wall) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    walls.sort()
    p99 = walls[min(len(walls) - 1, int(len(walls) * 0.99))]
    return statistics.median(walls), p99, statistics.median(cpus)


def stored_step(graph: WorkflowGraph, stored: str, event: NodeFinished) -> Callable[[], object]:
    def step() -> object:
        run = run_from_json(json.loads(stored))
        result = apply(graph, run, event)
        assert result.applied, result.note
        assert result.run is not None
        return json.dumps(run_to_json(result.run))
    return step


def _finish(graph: WorkflowGraph, run: WorkflowRun, key: str, at: int,
            item: int | None = None, message: str = "") -> WorkflowRun:
    unit = run.node(key) if item is None else (run.node(key).items or ())[item]
    step = apply(graph, run, NodeFinished(key, unit.attempt, Outcome.SUCCESS, at, item, message=message))
    assert step.run is not None and step.applied, step.note
    return step.run


def engine_cases() -> list[tuple[str, WorkflowGraph, str, NodeFinished]]:
    cases = []
    graph = parse_workflow(wide())
    run = apply(graph, None, RunStarted(0, 1)).run
    assert run is not None
    for i in range(SIZE - 2):
        run = _finish(graph, run, f"n{i}", i + 1)
    last = f"n{SIZE - 2}"
    cases.append(("wide: last parent done, sink starts", graph, json.dumps(run_to_json(run)),
                  NodeFinished(last, 1, Outcome.SUCCESS, 10_000)))
    graph = parse_workflow(deep())
    run = apply(graph, None, RunStarted(0, 1)).run
    assert run is not None
    for i in range(SIZE // 2):
        run = _finish(graph, run, f"n{i}", i + 1)
    cases.append(("deep: node 500 done, 501 starts", graph, json.dumps(run_to_json(run)),
                  NodeFinished(f"n{SIZE // 2}", 1, Outcome.SUCCESS, 10_000)))
    doc = {"nodes": [{"key": "list", "job_id": 1},
                     {"key": "each", "kind": "fanout", "job_id": 2, "items": "files", "parallelism": 10,
                      "params": "--file={{ item }}"}],
           "edges": [{"from": "list", "to": "each"}]}
    graph = parse_workflow(doc)
    files = [f"part-{i:04}.csv" for i in range(SIZE)]
    run = apply(graph, None, RunStarted(0, 1, params={"files": files})).run
    assert run is not None
    run = _finish(graph, run, "list", 1)
    for i in range(SIZE // 2):
        run = _finish(graph, run, "each", i + 2, item=i)
    cases.append(("fan-out: item 500 of 1,000 done, next starts", graph, json.dumps(run_to_json(run)),
                  NodeFinished("each", 1, Outcome.SUCCESS, 10_000, item=SIZE // 2)))
    cases.append(largest_case())
    return cases


FANOUTS = MAX_RUN_ITEMS // 1_000


def largest_case() -> tuple[str, WorkflowGraph, str, NodeFinished]:
    """The biggest state the limits allow, one item before the last fan-out's end."""
    jobs = SIZE - 1 - FANOUTS
    doc = {"nodes": [{"key": "root", "job_id": 1}]
           + [{"key": f"f{i}", "kind": "fanout", "job_id": 2, "items": "files", "parallelism": 100,
               "on_failure": "continue"} for i in range(FANOUTS)]
           + [{"key": f"j{i}", "job_id": 3} for i in range(jobs)],
           "edges": [{"from": "root", "to": f"f{i}"} for i in range(FANOUTS)]
           + [{"from": "root", "to": f"j{i}"} for i in range(jobs)]}
    graph = parse_workflow(doc)
    check_run_budget(graph)
    files = [f"part-{i:04}.csv" for i in range(1_000)]
    run = apply(graph, None, RunStarted(0, 1, params={"files": files})).run
    assert run is not None
    run = _finish(graph, run, "root", 1, message="m" * 500)
    for i in range(jobs):
        run = _finish(graph, run, f"j{i}", 2, message="m" * 500)
    for f in range(FANOUTS):
        for i in range(1_000 if f < FANOUTS - 1 else 990):
            run = _finish(graph, run, f"f{f}", 3, item=i, message="m" * 500)
    return (f"largest allowed: 1,000 nodes, {MAX_RUN_ITEMS:,} items, an item done", graph,
            json.dumps(run_to_json(run)), NodeFinished(f"f{FANOUTS - 1}", 1, Outcome.SUCCESS, 10_000,
                                                       item=990, message="m" * 500))


async def worst_gap(work: Callable[[], object], times: int, in_thread: bool) -> float:
    """The longest the loop went without running a 1 ms ticker while ``work`` ran ``times`` times."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    for _ in range(times):
        if in_thread:
            await asyncio.to_thread(work)
        else:
            work()
        await asyncio.sleep(0)
    done.set()
    await task
    return max(gaps) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{now}, python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cores, "
          f"load average {load}, {args.repeats} runs per row\n")
    print("| validation (1,000 nodes) | edges | median ms | p99 ms | CPU ms |")
    print("|---|---:|---:|---:|---:|")
    for name, doc in (("wide", wide()), ("deep", deep()), ("mixed", mixed())):
        body = json.dumps(doc)
        graph = parse_workflow(json.loads(body))
        rows = [
            ("parse_workflow", lambda doc=doc: parse_workflow(doc)),
            ("json.loads + parse_workflow + check_access",
             lambda body=body: check(parse_workflow(json.loads(body)))),
        ]
        for label, action in rows:
            median, p99, cpu = timed(action, args.repeats)
            print(f"| {name}: {label} | {len(graph.edges):,} | {median:.1f} | {p99:.1f} | {cpu:.1f} |")
    print("\n| engine step (read stored run, apply, write back) | state bytes | median ms | p99 ms "
          "| CPU ms |")
    print("|---|---:|---:|---:|---:|")
    cases = engine_cases()
    for label, graph, stored, event in cases:
        median, p99, cpu = timed(stored_step(graph, stored, event), args.repeats)
        print(f"| {label} | {len(stored):,} | {median:.2f} | {p99:.2f} | {cpu:.2f} |")
    _, graph, stored, event = cases[-1]
    step = stored_step(graph, stored, event)
    print("\n| largest allowed run, 20 events | loop's worst gap ms |")
    print("|---|---:|")
    modes = (("applied on the loop", False), ("applied in a worker thread (the driver)", True))
    for label, in_thread in modes:
        print(f"| {label} | {asyncio.run(worst_gap(step, 20, in_thread)):.1f} |")


if __name__ == "__main__":
    main()
