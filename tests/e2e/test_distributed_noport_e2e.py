"""Map-reduce end to end over executors that open no port: pull executors (runs and sub-tasks
through their poll of the admin) and broker executors (runs from RabbitMQ, sub-tasks through
their poll), with a real admin process (tests/e2e/mapred_kit.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobring.core.addresses import broker_name
from jobring.protocol.broker import executor_queue, group_queue
from tests.broker_kit import amqp_url, delete_queues, unique_app
from tests.e2e.mapred_kit import cluster_of

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


@pytest.mark.parametrize("dispatch", ["pull", "broker"])
async def test_map_reduce_over_executors_with_no_port(tmp_path: Path, dispatch: str) -> None:
    # Sub-tasks reach pull and broker executors through their poll of the admin; the mapping
    # run itself comes through the poll (pull) or from RabbitMQ (broker).
    broker = amqp_url() if dispatch == "broker" else None
    app = unique_app(f"mapred-{dispatch}")
    queues = [group_queue(app)]
    try:
        async for cluster in cluster_of(tmp_path, 2, app=app, dispatch=dispatch, broker=broker):
            job = await cluster.job("count_words")
            run_id = await cluster.trigger(job, "|".join(["a b", "c", "d e f"] * 10))
            run = await cluster.ended(run_id)
            assert run["state"] == "success", run
            assert f"reduce sum_counts: {(2 + 1 + 3) * 10}" in run["handle_msg"]
            keys = sorted(line.split()[1] for line in cluster.ran() if line.startswith("map "))
            assert keys == sorted(f"r/0.{i}" for i in range(30))  # each sub-task once
            assert cluster.ran().count("reduce") == 1
            online = (await cluster.admin.groups.get(cluster.group))["addresses"]
            assert all(a.startswith(f"{dispatch}://") for a in online), online
            queues += [executor_queue(app, broker_name(a)) for a in online]
    finally:
        if broker:
            await delete_queues(broker, *queues)
