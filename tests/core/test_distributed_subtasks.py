"""A child's attempts, retries and losses; retry of the failed ones; and the reduce started
exactly once under duplicated and reordered completion events on two admin nodes."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobring.core.distributed.join import (
    FailureTolerance,
    JoinError,
    JoinOutcome,
    ParentPhase,
    Progress,
    after_join,
    join,
    reduce_due,
    reduce_key,
)
from jobring.core.distributed.subtasks import (
    CancelRequested,
    Dispatched,
    Finished,
    Lost,
    RetryRequested,
    Task,
    TaskEvent,
    TaskPolicy,
    TaskState,
    apply_event,
    plan_retry,
    progress_after,
    progress_of,
    retry_attempt,
)

POLICY = TaskPolicy(max_retries=1, max_redispatches=1)
RUNNING = Task(TaskState.RUNNING, attempt=1, executor="e1")


def test_a_failure_is_retried_then_final() -> None:
    once = apply_event(RUNNING, Finished(1, ok=False), POLICY)
    assert once == Task(TaskState.PENDING, 1, "e1", failures=1)
    again = apply_event(once, Dispatched(2, "e2"), POLICY)
    assert again == Task(TaskState.RUNNING, 2, "e2", failures=1)
    assert apply_event(again, Finished(2, ok=False), POLICY) == Task(TaskState.FAILED, 2, "e2", failures=2)


def test_a_lost_attempt_is_dispatched_again_once_and_its_late_result_ignored() -> None:
    lost = apply_event(RUNNING, Lost(1), POLICY)
    assert lost == Task(TaskState.PENDING, 1, "e1", losses=1)
    assert apply_event(lost, Finished(1, ok=True), POLICY) is None  # the dead executor's late result
    second = apply_event(lost, Dispatched(2, "e2"), POLICY)
    assert second is not None
    assert apply_event(second, Finished(1, ok=True), POLICY) is None
    assert apply_event(second, Lost(2), POLICY) == Task(TaskState.FAILED, 2, "e2", losses=2)
    # A loss does not use a retry: the handler's budget is intact.
    assert apply_event(second, Finished(2, ok=False), POLICY) == Task(TaskState.PENDING, 2, "e2", 1, 1)


def test_events_that_do_not_fit_change_nothing() -> None:
    done = Task(TaskState.SUCCEEDED, 1, "e1")
    pending = Task()
    cases: list[tuple[Task, TaskEvent]] = [
        (done, Finished(1, ok=False)), (done, Lost(1)), (done, CancelRequested()), (done, RetryRequested()),
        (done, Dispatched(2, "e")), (pending, Dispatched(2, "e")), (pending, Finished(0, ok=True)),
        (RUNNING, Dispatched(2, "e")), (RUNNING, Finished(2, ok=True)), (RUNNING, Lost(0)),
        (RUNNING, RetryRequested()),
    ]
    for task, event in cases:
        assert apply_event(task, event, POLICY) is None, (task, event)


def test_cancel_and_the_users_retry() -> None:
    cancelled = apply_event(RUNNING, CancelRequested(), POLICY)
    assert cancelled is not None and cancelled.state is TaskState.CANCELLED
    failed = Task(TaskState.FAILED, 3, "e1", failures=2, losses=1)
    assert apply_event(failed, RetryRequested(), POLICY) == Task(TaskState.PENDING, 3, "e1")
    assert apply_event(cancelled, RetryRequested(), POLICY) == Task(TaskState.PENDING, 1, "e1")


def test_bad_policies_are_refused() -> None:
    with pytest.raises(JoinError):
        TaskPolicy(max_retries=-1)
    with pytest.raises(JoinError):
        TaskPolicy(max_redispatches=-1)


def test_plan_retry_takes_the_failed_and_cancelled_children_of_a_finished_parent() -> None:
    states = {"r/0.2": TaskState.FAILED, "r/0.0": TaskState.SUCCEEDED, "r/0.1": TaskState.CANCELLED}
    plan = plan_retry(ParentPhase.FAILED, 1, states)
    assert plan.tasks == ("r/0.1", "r/0.2") and plan.attempt == 2
    with pytest.raises(JoinError, match="still mapping"):
        plan_retry(ParentPhase.MAPPING, 1, states)
    with pytest.raises(JoinError, match="nothing failed"):
        plan_retry(ParentPhase.SUCCEEDED, 1, {"r/0.0": TaskState.SUCCEEDED})
    # A failed reduce with every child succeeded: no child to retry, the reduce runs again.
    assert plan_retry(ParentPhase.FAILED, 4, {"r/0.0": TaskState.SUCCEEDED}).tasks == ()
    # Succeeded within the tolerance: the user may still retry the failed ones.
    assert plan_retry(ParentPhase.SUCCEEDED, 1, states).tasks == ("r/0.1", "r/0.2")


def test_a_retry_interrupted_midway_goes_on_under_its_own_attempt() -> None:
    assert retry_attempt(ParentPhase.FAILED, 1, failed=True) == 2
    # RETRYING: the same request again completes it, whatever is left (not a third attempt).
    assert retry_attempt(ParentPhase.RETRYING, 2, failed=True) == 2
    assert retry_attempt(ParentPhase.RETRYING, 2, failed=False) == 2
    assert not ParentPhase.RETRYING.is_final
    with pytest.raises(JoinError, match="still reducing"):
        retry_attempt(ParentPhase.REDUCING, 2, failed=True)


def test_progress_deltas_match_a_recount() -> None:
    states = list(TaskState)
    progress = progress_of(states)
    assert progress == Progress(5, succeeded=1, failed=2, running=1)
    for i, old in enumerate(states):
        for new in TaskState:
            moved = states[:i] + [new] + states[i + 1:]
            assert progress_after(progress, old, new) == progress_of(moved)


@dataclass
class Parent:
    phase: ParentPhase = ParentPhase.MAPPING
    attempt: int = 1
    progress: Progress = field(default_factory=lambda: Progress(0))


@dataclass
class Admin:
    """Two admin nodes over one store: each event is applied with a conditional update on the
    child row; the parent's counters take the delta; the phase moves by a conditional update."""

    tasks: dict[int, Task]
    policy: TaskPolicy
    tolerance: FailureTolerance
    fail_fast: bool
    parent: Parent
    reduces: list[str] = field(default_factory=list)

    def apply(self, task_id: int, event: TaskEvent) -> bool:
        old = self.tasks[task_id]
        new = apply_event(old, event, self.policy)
        if new is None:
            return False
        self.tasks[task_id] = new  # UPDATE ... WHERE state = old.state AND attempt = old.attempt
        self.parent.progress = progress_after(self.parent.progress, old.state, new.state)
        return True

    def read_parent(self) -> Parent:
        return Parent(self.parent.phase, self.parent.attempt, self.parent.progress)

    def settle(self, seen: Parent) -> list[tuple[int, TaskEvent]]:
        """A node moves the phase from what it read; returns the cancellations to send."""
        verdict = join(seen.progress, self.tolerance, fail_fast=self.fail_fast)
        target = after_join(seen.phase, verdict, has_reduce=True)
        # UPDATE parent SET phase = :target WHERE phase = :seen AND attempt = :attempt
        changed = target is not seen.phase and (self.parent.phase, self.parent.attempt) == (seen.phase,
                                                                                           seen.attempt)
        if changed:
            self.parent.phase = target
            if reduce_due(seen.phase, verdict, has_reduce=True):  # only the node whose update won
                self.reduces.append(reduce_key(1, seen.attempt))
        if verdict.cancel_rest:
            return [(i, CancelRequested()) for i, t in self.tasks.items() if not t.state.is_final]
        return []


@settings(max_examples=200, deadline=None)
@given(count=st.integers(1, 12), seed=st.integers(0, 2**32), retries=st.integers(0, 2),
       tolerance=st.sampled_from([FailureTolerance(), FailureTolerance(max_failed=1),
                                  FailureTolerance.parse("20%")]), fail_fast=st.booleans())
def test_reduce_starts_exactly_once_under_duplicated_and_reordered_events(
    count: int, seed: int, retries: int, tolerance: FailureTolerance, fail_fast: bool
) -> None:
    rng = random.Random(seed)
    policy = TaskPolicy(max_retries=retries, max_redispatches=1)
    tasks = {i: Task() for i in range(count)}
    admin = Admin(tasks, policy, tolerance, fail_fast, Parent(progress=Progress(count)))
    inbox: list[tuple[int, TaskEvent]] = []
    for _ in range(100_000):
        # The dispatcher sends every pending child (recording each attempt before the call).
        for task_id, task in admin.tasks.items():
            if task.state is TaskState.PENDING:
                attempt = task.attempt + 1
                admin.apply(task_id, Dispatched(attempt, rng.choice(["e1", "e2", "e3"])))
                outcomes: list[TaskEvent] = [Finished(attempt, True), Finished(attempt, False),
                                             Finished(attempt, True), Lost(attempt)]
                outcome = rng.choice(outcomes)
                inbox.extend([(task_id, outcome)] * rng.randint(1, 3))  # delivered up to three times
        if not inbox:
            break
        rng.shuffle(inbox)
        task_id, event = inbox.pop()
        admin.apply(task_id, event)
        # Both nodes read the parent before either writes: the conditional update decides.
        for seen in [admin.read_parent(), admin.read_parent()]:
            inbox.extend(admin.settle(seen))
    assert all(t.state.is_final for t in admin.tasks.values())
    recount = progress_of(t.state for t in admin.tasks.values())
    assert admin.parent.progress == recount
    success = recount.failed <= tolerance.allowed(count)
    assert admin.reduces == ([reduce_key(1, 1)] if success else [])
    expected = ParentPhase.REDUCING if success else ParentPhase.FAILED
    assert admin.parent.phase is expected
    assert join(recount, tolerance).outcome is (JoinOutcome.SUCCESS if success else JoinOutcome.FAILED)
