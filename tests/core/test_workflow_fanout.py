"""Fan-out nodes (a job per list item, capped parallelism) and sub-workflow nodes."""

from __future__ import annotations

from typing import Any

import pytest

from jobring.core.workflow import (
    MAX_RUN_ITEMS,
    FinishRun,
    KillJob,
    NodeDispatched,
    NodeFinished,
    Outcome,
    RunStatus,
    StartJob,
    StartSubworkflow,
    StopRun,
    StopSubworkflow,
    WorkflowInvalid,
    check_run_budget,
    context_changes,
    parse_workflow,
)
from tests.core.workflow_kit import Driver, finish_of, kills, starts


def fanout(parallelism: int = 2, rule: str = "stop", retries: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "nodes": [{"key": "list", "job_id": 1},
                  {"key": "each", "kind": "fanout", "job_id": 2, "items": "files", "parallelism": parallelism,
                   "params": "--file={{ item }} --n={{ item_index }} --day={{ day }}", "on_failure": rule,
                   "retries": retries, **extra},
                  {"key": "merge", "job_id": 3}],
        "edges": [{"from": "list", "to": "each"}, {"from": "each", "to": "merge"}],
    }


def started_fanout(files: list[Any], **kwargs: Any) -> Driver:
    d = Driver(fanout(**kwargs), params={"day": "d1"})
    d.ok("list", context={"files": files})
    return d


def running_items(d: Driver) -> list[int]:
    items = d.node("each").items or ()
    return [i for i, item in enumerate(items) if item.status.value == "running"]


def test_items_start_up_to_the_cap_and_the_next_when_one_finishes() -> None:
    d = Driver(fanout(), params={"day": "d1"})
    step = d.ok("list", context={"files": ["a.csv", "b.csv", "c.csv", "d.csv"]})
    assert step.commands == (StartJob("each", 1, 0, 2, "--file=a.csv --n=0 --day=d1", None),
                             StartJob("each", 1, 1, 2, "--file=b.csv --n=1 --day=d1", None))
    d.dispatched("each", 900, item=1)
    assert d.unit("each", 1).run_id == 900
    assert starts(d.ok("each", 1)) == ["each#2"]
    assert running_items(d) == [0, 2]
    assert starts(d.ok("each", 0)) == ["each#3"]
    d.ok("each", 2)
    assert starts(d.ok("each", 3)) == ["merge"]
    assert d.status("each") == "success" and d.node("each").message == "4 items succeeded"


def test_item_events_must_name_an_existing_item() -> None:
    d = started_fanout(["a"])
    assert d.send(NodeFinished("each", 1, Outcome.SUCCESS, d.tick())).note == \
        "node 'each' is a fan-out: events name an item"
    no_item = d.send(NodeFinished("each", 1, Outcome.SUCCESS, d.tick(), item=5))
    assert no_item.note == "node 'each' has no item 5"
    assert d.send(NodeDispatched("list", 1, 3, d.tick(), item=0)).note == \
        "node 'list' is not a fan-out: events name no item"


def test_an_empty_list_succeeds_at_once_and_a_non_list_fails() -> None:
    d = started_fanout([])
    assert d.status("each") == "success" and d.status("merge") == "running"
    d = started_fanout({"not": "a list"})  # type: ignore[arg-type]
    assert d.status("each") == "failed" and "expected a list" in d.node("each").message
    d = Driver(fanout())
    d.ok("list", context={})
    assert "variable 'files' does not exist" in d.node("each").message
    d = Driver(fanout(items="[ctx, ctx, ctx]"))
    d.ok("list", context={"files": "x" * 30_000})
    assert d.status("each") == "failed" and "items: larger than 65536 bytes" in d.node("each").message


def test_items_retry_on_their_own() -> None:
    d = started_fanout(["a", "b"], retries=1)
    assert starts(d.fail("each", 0)) == ["each#0"]
    assert d.unit("each", 0).attempt == 2 and d.unit("each", 1).attempt == 1
    d.ok("each", 0)
    assert starts(d.ok("each", 1)) == ["merge"]


def test_rule_stop_fails_at_the_first_failed_item_and_kills_the_others() -> None:
    d = started_fanout(["a", "b", "c"], parallelism=2)
    d.dispatched("each", 71, item=1)
    step = d.fail("each", 0)
    assert step.commands[0] == KillJob("each", 1, 1, 71)
    assert finish_of(step) is not None and d.state.status is RunStatus.FAILED
    assert [d.status("each", i) for i in range(3)] == ["failed", "stopped", "stopped"]
    assert d.node("each").message.startswith("item 0 failed")


@pytest.mark.parametrize(("rule", "merge", "run"), [("skip_descendants", "skipped", "failed"),
                                                     ("continue", "running", "running")])
def test_other_rules_let_the_remaining_items_run(rule: str, merge: str, run: str) -> None:
    d = started_fanout(["a", "b", "c"], parallelism=1, rule=rule)
    assert starts(d.fail("each", 0)) == ["each#1"]
    d.ok("each", 1)
    d.ok("each", 2)
    assert d.status("each") == "failed" and d.node("each").message == "1 of 3 items failed"
    assert d.status("merge") == merge and d.state.status.value == run


def test_items_add_to_the_context_and_a_bad_param_fails_only_its_item() -> None:
    d = Driver(fanout(rule="continue", params="{{ item.name }}"))
    d.ok("list", context={"files": [{"name": "x"}, {"nope": 1}, {"name": "z"}]})
    bad = d.unit("each", 1)
    assert bad.status.value == "failed" and "field 'name' does not exist" in bad.message
    assert running_items(d) == [0, 2]
    d.ok("each", 0, context={"item0": 1})
    d.ok("each", 2, context={"item2": 1})
    assert {"item0", "item2"} <= set(d.state.context)
    assert d.status("merge") == "running"


def test_many_items_never_exceed_the_cap() -> None:
    d = started_fanout(list(range(200)), parallelism=7)
    finished = 0
    while d.status("each") == "running":
        running = running_items(d)
        assert len(running) == 7 or finished > 200 - 7
        d.ok("each", running[finished % len(running)])
        finished += 1
    assert finished == 200 and len([k for k in d.started if k[0] == "each"]) == 200


SUB: dict[str, Any] = {
    "nodes": [{"key": "prep", "job_id": 1}, {"key": "child", "kind": "subworkflow", "workflow_id": 9,
                                              "retries": 1, "timeout_s": 600},
              {"key": "after", "job_id": 2, "params": "{{ child_result }}"}],
    "edges": [{"from": "prep", "to": "child"}, {"from": "child", "to": "after"}],
}


def test_a_sub_workflow_gets_the_context_and_hands_back_its_changes() -> None:
    d = Driver(SUB, params={"day": "d"})
    step = d.ok("prep", context={"rows": 1})
    assert step.commands == (StartSubworkflow("child", 1, 9, {"day": "d", "rows": 1}, 600),)
    d.dispatched("child", 4242)
    child_final = {"day": "d", "rows": 1, "child_result": "ok"}
    changes = context_changes({"day": "d", "rows": 1}, child_final)
    step = d.send(NodeFinished("child", 1, Outcome.SUCCESS, d.tick(), context=changes))
    assert step.commands == (StartJob("after", 1, None, 2, "ok", None),)
    assert d.node("child").run_id == 4242


def test_a_failed_sub_workflow_is_retried_and_a_stop_stops_it() -> None:
    d = Driver(SUB)
    d.ok("prep")
    d.dispatched("child", 1)
    assert starts(d.fail("child")) == ["child"]
    d.dispatched("child", 2)
    step = d.send(StopRun(d.tick()))
    assert step.commands[0] == StopSubworkflow("child", 2, 2)
    assert kills(step) == ["child"]
    assert finish_of(step) == FinishRun(RunStatus.STOPPED, "stopped by a user", 1)


def test_a_sub_workflow_timeout_stops_the_child() -> None:
    d = Driver(SUB)
    d.ok("prep")
    step = d.timed_out("child")
    assert isinstance(step.commands[0], StopSubworkflow) and starts(step) == ["child"]


def wide_fanouts(count: int) -> dict[str, Any]:
    """A root and ``count`` fan-out nodes below it, each over the root's ``xs``."""
    return {"nodes": [{"key": "root", "job_id": 1}]
            + [{"key": f"f{i}", "kind": "fanout", "job_id": 1, "items": "xs", "parallelism": 100}
               for i in range(count)],
            "edges": [{"from": "root", "to": f"f{i}"} for i in range(count)]}


def test_a_run_holds_at_most_max_run_items_fan_out_items() -> None:
    # 11 fan-outs of 1,000 items: the 11th would make 11,000 (a graph stored before the save-time
    # budget; the run is held to it item by item).
    d = Driver(wide_fanouts(11))
    step = d.ok("root", context={"xs": list(range(1_000))})
    assert len(starts(step)) == 10 * 100
    over = [key for key, record in d.state.nodes.items() if record.status.value == "failed"]
    assert over == ["f10"]
    assert d.node("f10").message == (f"items: 1000 more items would make this run hold more than "
                                     f"{MAX_RUN_ITEMS} fan-out items (10000 already)")
    assert sum(len(r.items or ()) for r in d.state.nodes.values()) == MAX_RUN_ITEMS


def test_saving_refuses_graphs_whose_fan_outs_could_exceed_the_run_budget() -> None:
    check_run_budget(parse_workflow(wide_fanouts(MAX_RUN_ITEMS // 1_000)))
    with pytest.raises(WorkflowInvalid) as caught:
        check_run_budget(parse_workflow(wide_fanouts(MAX_RUN_ITEMS // 1_000 + 1)))
    assert (caught.value.field, caught.value.node) == ("nodes[11].kind", "f10")
    assert "at most 10 fan-out nodes" in caught.value.message
