"""CPU of one workflow step in process: the last parent's result of a wide run (one root, ``--nodes``
minus 2 parallel nodes, one join), the step the join's start waits for.

    .venv/bin/python bench/workflow_step.py --nodes 1000

Prints the median and the fastest of ``--repeat`` timings of: the engine's ``apply`` of that
result, encoding the run's state document whole (``dumps(run_to_json(run))``), and, where the
tree has it, encoding it with a ``StateEncoder`` that encoded the run before that result (what
a driver that stored the run last does). To measure another checkout, put its ``src`` first:
``PYTHONPATH=/path/to/checkout/src``.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from jobring.admin.store.workflow_records import dumps
from jobring.core.workflow import (
    NodeDispatched,
    NodeFinished,
    Outcome,
    RunStarted,
    WorkflowRun,
    apply,
    parse_workflow,
    run_to_json,
)

T0 = 1_764_500_000_000


def wide_run(nodes: int) -> tuple[Any, WorkflowRun, NodeFinished]:
    """The graph, the run with every parent but the last finished, and the last one's result."""
    keys = [f"w-{i}" for i in range(nodes)]
    middle = keys[1:-1]
    graph = parse_workflow({"nodes": [{"key": k, "job_id": 1} for k in keys],
                            "edges": [{"from": keys[0], "to": k} for k in middle]
                            + [{"from": k, "to": keys[-1]} for k in middle]})
    run = apply(graph, None, RunStarted(T0, 1)).run
    events: list[Any] = [NodeDispatched(keys[0], 1, 1, T0), NodeFinished(keys[0], 1, Outcome.SUCCESS, T0 + 5)]
    events += [NodeDispatched(k, 1, 10 + i, T0 + 10) for i, k in enumerate(middle)]
    events += [NodeFinished(k, 1, Outcome.SUCCESS, T0 + 900, run_id=10 + i)
               for i, k in enumerate(middle[:-1])]
    for event in events:
        step = apply(graph, run, event)
        run = step.run if step.run is not None else run
    assert run is not None
    return graph, run, NodeFinished(middle[-1], 1, Outcome.SUCCESS, T0 + 2_000, run_id=9_999)


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(median, fastest) ms of ``fn``, with this process's cyclic GC off (a collection in one
    sample is not the step's cost)."""
    samples = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeat):
            start = time.perf_counter_ns()
            fn()
            samples.append((time.perf_counter_ns() - start) / 1e6)
    finally:
        gc.enable()
    return statistics.median(samples), min(samples)


def encoded_by_a_kept_encoder(run: WorkflowRun, after: WorkflowRun) -> Callable[[], object] | None:
    """Encoding ``after`` with an encoder that encoded ``run`` (the run as the driver stored it
    before the result); None where the tree has no StateEncoder."""
    try:
        from jobring.admin.services.workflow_steps import StateEncoder  # noqa: PLC0415 (older trees lack it)
    except ImportError:
        return None
    encoder = StateEncoder()
    encoder.encode(run)
    assert encoder.encode(after) == dumps(run_to_json(after))
    encoder.encode(run)
    texts = encoder._texts  # noqa: SLF001 (each sample starts from the encoder as it was then)

    def encode() -> object:
        encoder._texts = texts  # noqa: SLF001
        return encoder.encode(after)

    return encode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    graph, run, last = wide_run(args.nodes)
    after = apply(graph, run, last).run
    assert after is not None
    rows: list[tuple[str, Callable[[], object]]] = [
        ("apply (the last parent's result)", lambda: apply(graph, run, last)),
        ("encode the state whole", lambda: dumps(run_to_json(after)))]
    kept = encoded_by_a_kept_encoder(run, after)
    if kept is not None:
        rows.append(("encode it with the encoder that encoded the run before", kept))
    load = os.getloadavg()
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, Python {platform.python_version()}, "
          f"{os.cpu_count()} cores, load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; "
          f"{args.nodes} nodes, state {len(dumps(run_to_json(after)))} characters")
    print("| part | median ms | fastest ms |\n|---|---:|---:|")
    for name, fn in rows:
        median, fastest = timed(fn, args.repeat)
        print(f"| {name} | {median:.3f} | {fastest:.3f} |")


if __name__ == "__main__":
    main()
