"""One state transition under construction: the mechanics shared by events and repairs.

A :class:`Transition` copies the run's node map (records themselves are immutable), changes
records, collects commands, and builds the next :class:`WorkflowRun`. Nodes whose parents
changed are queued and settled in topological order, so a chain of instant nodes (decisions,
skips, empty fan-outs) resolves within the same event.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import replace

from jobring.core.expression import ExpressionError, JsonValue
from jobring.core.workflow.context import (
    CONTEXT_MAX_BYTES,
    ContextError,
    json_size,
    merge_context,
    namespace,
    parse_result_message,
)
from jobring.core.workflow.events import (
    Command,
    FinishRun,
    KillJob,
    Outcome,
    StartJob,
    StartSubworkflow,
    Step,
    StopSubworkflow,
)
from jobring.core.workflow.joins import Verdict, incoming_signals, join_verdict
from jobring.core.workflow.model import (
    MAX_FANOUT_ITEMS,
    MAX_RUN_ITEMS,
    PARAMS_MAX_CHARS,
    FailureRule,
    Node,
    NodeKind,
    WorkflowGraph,
)
from jobring.core.workflow.state import (
    FRESH,
    NodeRun,
    NodeStatus,
    RunStatus,
    SkipReason,
    Unit,
    WorkflowRun,
    clip_message,
)

__all__ = ["Transition"]


class Transition:
    """The next state of ``run`` being built at ``at_ms`` (see the module docstring)."""

    def __init__(self, graph: WorkflowGraph, run: WorkflowRun, at_ms: int) -> None:
        self.graph, self.base_run, self.at = graph, run, at_ms
        self.status, self.round, self.message = run.status, run.round, run.message
        self.ended_ms = run.ended_ms
        self.context: Mapping[str, JsonValue] = run.context
        self.nodes: dict[str, NodeRun] = dict(run.nodes)
        self.commands: list[Command] = []
        self.queue: list[tuple[int, str]] = []
        self.changed = False

    # -- bookkeeping ---------------------------------------------------------------------------

    def node(self, key: str) -> NodeRun:
        return self.nodes.get(key, FRESH)

    def put(self, key: str, record: NodeRun) -> None:
        self.nodes[key] = record
        self.changed = True

    def step(self) -> Step:
        if not self.changed:
            return Step(self.base_run, (), "nothing to do")
        run = WorkflowRun(
            status=self.status, version=self.base_run.version, started_ms=self.base_run.started_ms,
            context=self.context, nodes=self.nodes, retries=self.base_run.retries, round=self.round,
            ended_ms=self.ended_ms, message=self.message,
        )
        return Step(run, tuple(self.commands))

    def retries_of(self, node: Node) -> int:
        return node.retries if node.retries is not None else self.base_run.retries.get(node.key, 0)

    def reopen(self) -> None:
        """A repair starts a new round of an ended (or running) run."""
        self.round += 1
        self.status, self.ended_ms, self.message = RunStatus.RUNNING, None, ""
        self.changed = True

    # -- settling --------------------------------------------------------------------------------

    def enqueue(self, key: str) -> None:
        heapq.heappush(self.queue, (self.graph.position[key], key))

    def wake_children(self, key: str) -> None:
        for edge in self.graph.children[key]:
            self.enqueue(edge.target)

    def enqueue_waiting(self) -> None:
        for key in self.graph.order:
            if self.node(key).status is NodeStatus.WAITING:
                self.enqueue(key)

    def settle(self) -> None:
        """Start or skip every queued waiting node whose join is decided; end the run when
        nothing is left to wait for."""
        while self.queue and self.status is RunStatus.RUNNING:
            _, key = heapq.heappop(self.queue)
            record = self.node(key)
            if record.status is not NodeStatus.WAITING:
                continue
            node = self.graph.nodes[key]
            verdict = join_verdict(node.join, incoming_signals(self.graph, self.nodes, key))
            if verdict is Verdict.RUN:
                self.start(node)
            elif verdict is not Verdict.WAIT:
                branch = verdict is Verdict.SKIP_BRANCH
                message = "branch not taken" if branch else "skipped: a node above failed"
                self.put(key, replace(record, status=NodeStatus.SKIPPED, ended_ms=self.at, message=message,
                                      skip=SkipReason.BRANCH if branch else SkipReason.UPSTREAM))
                self.wake_children(key)
        if self.status is RunStatus.RUNNING and self._all_final():
            self.complete()

    def _all_final(self) -> bool:
        if len(self.nodes) < len(self.graph.nodes):
            return False
        # Newest first: a node started by this step was added last (records start out of the
        # map). A loop on identity: the status's is_final is a call, and this runs at every step.
        waiting, running = NodeStatus.WAITING, NodeStatus.RUNNING
        for record in reversed(self.nodes.values()):
            status = record.status
            if status is waiting or status is running:
                return False
        return True

    def complete(self) -> None:
        failed = [key for key in self.graph.order if self._counts_as_failure(key)]
        if failed:
            self.finish_run(RunStatus.FAILED, f"node {failed[0]!r} did not succeed")
        else:
            self.finish_run(RunStatus.SUCCESS, "")

    def _counts_as_failure(self, key: str) -> bool:
        record = self.node(key)
        if record.status is NodeStatus.STOPPED:
            return True
        rule = self.graph.nodes[key].on_failure
        return record.status is NodeStatus.FAILED and rule is not FailureRule.CONTINUE

    def finish_run(self, status: RunStatus, message: str) -> None:
        self.status, self.ended_ms, self.message = status, self.at, clip_message(message)
        self.commands.append(FinishRun(status, self.message, self.round))
        self.queue.clear()
        self.changed = True

    def end(self, status: RunStatus, message: str) -> None:
        """End the run now: kill what runs, stop what waits."""
        for key in self.graph.order:
            record = self.node(key)
            if record.status is NodeStatus.RUNNING:
                self.put(key, replace(self.halt(key, record), status=NodeStatus.STOPPED, ended_ms=self.at,
                                      message=clip_message(f"{record.message} (killed: {message})".lstrip())))
            elif record.status is NodeStatus.WAITING:
                self.put(key, replace(record, status=NodeStatus.STOPPED, message=f"not run: {message}"))
        self.finish_run(status, message)

    def halt(self, key: str, record: NodeRun) -> NodeRun:
        """Emit the kill of whatever runs for ``key``; running and waiting items become stopped."""
        node = self.graph.nodes[key]
        if node.kind is NodeKind.SUBWORKFLOW:
            self.commands.append(StopSubworkflow(key, record.attempt, record.run_id))
        elif node.kind is NodeKind.JOB:
            self.commands.append(KillJob(key, record.attempt, None, record.run_id))
        elif record.items is not None:
            items = list(record.items)
            for index, item in enumerate(items):
                if item.status is NodeStatus.RUNNING:
                    self.commands.append(KillJob(key, item.attempt, index, item.run_id))
                if not item.status.is_final:
                    items[index] = replace(item, status=NodeStatus.STOPPED, ended_ms=self.at)
            record = replace(record, items=tuple(items))
        return record

    # -- starting --------------------------------------------------------------------------------

    def start(self, node: Node) -> None:
        if node.kind is NodeKind.DECISION:
            self.decide(node)
        elif node.kind is NodeKind.FANOUT:
            self.start_fanout(node)
        else:
            self.start_attempt(node)

    def start_attempt(self, node: Node) -> None:
        """Start the next attempt of a job or sub-workflow node (first start or a retry)."""
        record = self.node(node.key)
        attempt = record.attempt + 1
        started = record.started_ms if record.status is NodeStatus.RUNNING else self.at
        running = replace(record, status=NodeStatus.RUNNING, attempt=attempt, run_id=None,
                          started_ms=started, ended_ms=None)
        if node.kind is NodeKind.SUBWORKFLOW:
            assert node.workflow_id is not None
            self.put(node.key, running)
            self.commands.append(StartSubworkflow(node.key, attempt, node.workflow_id, dict(self.context),
                                                  node.timeout_s))
            return
        assert node.job_id is not None
        try:
            params = self.render_params(node, namespace(self.context))
        except ExpressionError as exc:
            self.put(node.key, running)
            self.fail_node(node, f"params: {exc}")
            return
        self.put(node.key, running)
        self.commands.append(StartJob(node.key, attempt, None, node.job_id, params, node.timeout_s))

    @staticmethod
    def render_params(node: Node, names: Mapping[str, object]) -> str | None:
        if node.params is None:
            return None
        return node.params.render(names, max_chars=PARAMS_MAX_CHARS)  # type: ignore[arg-type]

    def decide(self, node: Node) -> None:
        record = self.node(node.key)
        names = namespace(self.context)
        edges = self.graph.children[node.key]
        taken: list[str] = []
        running = replace(record, status=NodeStatus.RUNNING, attempt=record.attempt + 1, started_ms=self.at)
        for edge in edges:
            try:
                if edge.when is not None and edge.when.evaluate_bool(names):
                    taken.append(edge.target)
            except ExpressionError as exc:
                self.put(node.key, running)
                self.fail_node(node, f"condition of the edge to {edge.target!r}: {exc}")
                return
        if not taken:
            taken = [edge.target for edge in edges if edge.otherwise]
        message = f"took the edge to {', '.join(taken)}" if taken else "no condition held, no edge taken"
        self.put(node.key, replace(running, status=NodeStatus.SUCCESS, ended_ms=self.at, taken=tuple(taken),
                                   message=message))
        self.wake_children(node.key)

    def start_fanout(self, node: Node) -> None:
        record = self.node(node.key)
        running = replace(record, status=NodeStatus.RUNNING, attempt=record.attempt + 1, started_ms=self.at,
                          ended_ms=None, message="")
        if record.values is None:
            self.put(node.key, running)
            assert node.items is not None
            try:
                values = node.items.evaluate(namespace(self.context))
            except ExpressionError as exc:
                self.fail_node(node, f"items: {exc}")
                return
            if type(values) is not list or len(values) > MAX_FANOUT_ITEMS:
                self.fail_node(node, f"items: expected a list of at most {MAX_FANOUT_ITEMS} items")
                return
            if json_size(values) > CONTEXT_MAX_BYTES:  # kept in the run's state, like the context
                self.fail_node(node, f"items: larger than {CONTEXT_MAX_BYTES} bytes as JSON")
                return
            held = self.run_items(but=node.key)
            if held + len(values) > MAX_RUN_ITEMS:
                self.fail_node(node, f"items: {len(values)} more items would make this run hold more "
                               f"than {MAX_RUN_ITEMS} fan-out items ({held} already)")
                return
            running = replace(running, values=tuple(values), items=tuple(Unit() for _ in values))
        self.put(node.key, running)
        self.fill_fanout(node)

    def run_items(self, *, but: str) -> int:
        """How many fan-out items the run holds, in every node other than ``but``."""
        return sum(len(record.items) for key, record in self.nodes.items()
                   if key != but and record.items is not None)

    def fill_fanout(self, node: Node) -> None:
        """Start waiting items up to the parallelism cap; finish the node when all are done."""
        record = self.node(node.key)
        assert record.items is not None and node.parallelism is not None
        running = sum(1 for item in record.items if item.status is NodeStatus.RUNNING)
        for index, item in enumerate(record.items):
            if running >= node.parallelism:
                break
            if item.status is NodeStatus.WAITING:
                running += self.start_item(node, index)
                if self.node(node.key).status is not NodeStatus.RUNNING:
                    return  # an item's failure ended the node (rule stop)
        record = self.node(node.key)
        assert record.items is not None
        if all(item.status.is_final for item in record.items):
            failed = sum(1 for item in record.items if item.status is not NodeStatus.SUCCESS)
            if failed:
                self.fail_node(node, f"{failed} of {len(record.items)} items failed")
            else:
                self.succeed(node, f"{len(record.items)} items succeeded")

    def start_item(self, node: Node, index: int) -> int:
        """Start the item's next attempt: 1 when started, 0 when its params did not render."""
        record = self.node(node.key)
        assert record.items is not None and record.values is not None and node.job_id is not None
        item = record.items[index]
        attempt = item.attempt + 1
        started = item.started_ms if item.status is NodeStatus.RUNNING else self.at
        running = replace(item, status=NodeStatus.RUNNING, attempt=attempt, run_id=None, started_ms=started,
                          ended_ms=None)
        self.put_item(node.key, index, running)
        try:
            names = namespace(self.context, item=record.values[index], item_index=index)
            params = self.render_params(node, names)
        except ExpressionError as exc:
            self.item_failed(node, index, f"params: {exc}")
            return 0
        self.commands.append(StartJob(node.key, attempt, index, node.job_id, params, node.timeout_s))
        return 1

    def put_item(self, key: str, index: int, item: Unit) -> None:
        record = self.node(key)
        assert record.items is not None
        items = list(record.items)
        items[index] = item
        self.put(key, replace(record, items=tuple(items)))

    # -- results ---------------------------------------------------------------------------------

    def additions(self, node: Node, message: str, context: Mapping[str, object] | None) -> str | None:
        """Merge what a successful attempt adds to the context; the error, if it cannot be."""
        added: dict[str, object] = {}
        if node.result_json:
            parsed, _ = parse_result_message(message)
            added.update(parsed or {})
        added.update(context or {})
        if not added:
            return None
        try:
            self.context = merge_context(self.context, added)
        except ContextError as exc:
            return str(exc)
        return None

    def succeed(self, node: Node, message: str) -> None:
        record = self.node(node.key)
        self.put(node.key, replace(record, status=NodeStatus.SUCCESS, ended_ms=self.at,
                                   message=clip_message(message)))
        self.wake_children(node.key)

    def attempt_failed(self, node: Node, outcome: Outcome, message: str, index: int | None = None) -> None:
        """Retry the attempt while the node's retries allow (not after a kill), else fail."""
        record = self.node(node.key)
        unit: Unit = record if index is None else (record.items or ())[index]
        text = clip_message(f"attempt {unit.attempt} {outcome.value}: {message}".rstrip(": "))
        retry = outcome is not Outcome.KILLED and unit.attempt - unit.base <= self.retries_of(node)
        if index is None:
            if retry:
                self.put(node.key, replace(record, message=text))
                self.start_attempt(node)
            else:
                self.fail_node(node, text)
            return
        if retry:
            self.put_item(node.key, index, replace(unit, message=text))
            self.start_item(node, index)
        else:
            self.item_failed(node, index, text)
        if self.node(node.key).status is NodeStatus.RUNNING:
            self.fill_fanout(node)

    def item_failed(self, node: Node, index: int, message: str) -> None:
        """An item's final failure: under ``stop`` the node fails at once, otherwise the other
        items go on (the node fails at the end, and its rule applies then)."""
        record = self.node(node.key)
        assert record.items is not None
        failed = replace(record.items[index], status=NodeStatus.FAILED, ended_ms=self.at,
                         message=clip_message(message))
        self.put_item(node.key, index, failed)
        if node.on_failure is FailureRule.STOP:
            self.fail_node(node, f"item {index} failed: {message}")

    def fail_node(self, node: Node, message: str) -> None:
        """The node's final failure; its failure rule applies."""
        record = self.node(node.key)
        if node.kind is NodeKind.FANOUT:
            record = self.halt(node.key, record)
        self.put(node.key, replace(record, status=NodeStatus.FAILED, ended_ms=self.at,
                                   message=clip_message(message)))
        if node.on_failure is FailureRule.STOP:
            self.end(RunStatus.FAILED, f"node {node.key!r} failed: {message}")
        else:
            self.wake_children(node.key)
