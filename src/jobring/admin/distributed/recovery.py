"""The running sub-tasks a dead admin node had claimed: ask their executors, send again only
what none holds (docs/distributed-jobs.md, "An admin node dies").

A node claims sub-tasks (RUNNING, a new attempt, ``dispatched_by`` its id, the executor
chosen) and then POSTs them. Dying between the two, it leaves sub-tasks no executor has;
dying after, sub-tasks that run, or ran and wait for their result to reach an admin. Once it
is no longer announced alive, another node asks each executor
(``/jobring/subtasks/received``: which of these ``[run, id, attempt]`` do you hold?):

* Held: the node takes them over (``dispatched_by`` becomes its id); their results come as
  usual, and the executor's death is handled as for any running sub-task.
* Not held, the executor answering: lost now (``Lost``), so the pump dispatches them again.
* Its executor has left the group: lost now (it went with them).
* An executor without the endpoint (an older jobring): lost now, dispatched again (at least
  once, as before the question existed).
* No usable answer (unreachable, timed out): asked again next round; after
  ``give_up_after_ms`` lost as well (at least once rather than never).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.store import JobGroup, Store
from jobring.admin.store.subtasks import DistributedRun, Orphan, TaskUpdate
from jobring.core.clock import Clock
from jobring.core.distributed import Lost
from jobring.protocol.models import SUCCESS_CODE, msg_uri_not_found

__all__ = ["RECEIVED_PATH", "DeadNodeSubTasks"]

log = logging.getLogger(__name__)

RECEIVED_PATH = "jobring/subtasks/received"
_NOT_FOUND = msg_uri_not_found("/" + RECEIVED_PATH)
_QUESTION = 5_000  # sub-tasks per question (the executor takes up to 10,000)
Ended = Callable[[Sequence[DistributedRun]], Awaitable[None]]


class DeadNodeSubTasks:
    """One round at a time (the pump's take-back): ask, take over what is held, lose the rest."""

    def __init__(
        self, store: Store, client: ExecutorClient, clock: Clock, ended: Ended, node_id: str,
        *, give_up_after_ms: int = 60_000,
    ) -> None:
        self._store = store
        self._client = client
        self._clock = clock
        self._ended = ended
        self._node = node_id
        self.give_up_after_ms = give_up_after_ms
        self._unsure_since: dict[int, int] = {}  # sub-task id -> when its executor first did not answer
        # For metrics and tests: sub-tasks taken over (held by their executor) and sent again.
        self.adopted = 0
        self.resent = 0

    async def round(self) -> int:
        """Settle the dead nodes' running sub-tasks; returns how many were lost (sent again)."""
        orphans = await self._store.distributed.claimed_by_dead_nodes(self._clock.now_ms(), self._node)
        current = {o.id for o in orphans}
        self._unsure_since = {i: t for i, t in self._unsure_since.items() if i in current}
        if not orphans:
            return 0
        groups = {g: await self._store.groups.get(g) for g in sorted({o.job_group for o in orphans})}
        by_executor: dict[tuple[int, str], list[Orphan]] = {}
        lost: list[tuple[Orphan, str]] = []
        for orphan in orphans:
            group = groups[orphan.job_group]
            if group is None or orphan.executor is None or orphan.executor not in group.routable_addresses:
                lost.append((orphan, f"executor {orphan.executor} left the group"))
            else:
                by_executor.setdefault((orphan.job_group, orphan.executor), []).append(orphan)
        asked = await asyncio.gather(*(
            self._ask(groups[g], address, part)
            for (g, address), tasks in by_executor.items()
            for part in (tasks[i : i + _QUESTION] for i in range(0, len(tasks), _QUESTION))
        ))
        held: list[Orphan] = []
        now = self._clock.now_ms()
        for part, answer in asked:
            if isinstance(answer, set):
                held += [o for o in part if o.id in answer]
                lost += [(o, "not received by its executor") for o in part if o.id not in answer]
                continue
            for orphan in part:
                since = self._unsure_since.setdefault(orphan.id, now)
                if answer is None and now - since < self.give_up_after_ms:
                    continue
                lost.append((orphan, "its executor could not say whether it received it"))
        for orphan in [*held, *(o for o, _ in lost)]:
            self._unsure_since.pop(orphan.id, None)
        return await self._settle(held, lost)

    async def _ask(
        self, group: JobGroup | None, address: str, orphans: list[Orphan]
    ) -> tuple[list[Orphan], set[int] | bool | None]:
        """(the orphans, what the executor said): the ids it holds, False for an executor
        without the endpoint, None for no usable answer."""
        assert group is not None
        body = {"tasks": [[o.run_id, o.id, o.attempt] for o in orphans]}
        token = group.access_token or None
        answer = await self._client.call(address, RECEIVED_PATH, body, token, group.app_name)
        listed = answer.content.get("received") if isinstance(answer.content, dict) else None
        if answer.code == SUCCESS_CODE and isinstance(listed, list):
            return orphans, {i for i in listed if isinstance(i, int)}
        if answer.msg == _NOT_FOUND:
            return orphans, False
        log.warning("executor %s cannot say which of %d sub-task(s) it holds: %s; asking again next round",
                    address, len(orphans), answer.msg)
        return orphans, None

    async def _settle(self, held: list[Orphan], lost: list[tuple[Orphan, str]]) -> int:
        if held:
            taken = await self._store.distributed.adopt(held, self._node)
            self.adopted += taken
        if not held and not lost:
            return 0
        nodes = sorted({o.node for o in held} | {o.node for o, _ in lost})
        log.warning(
            "running sub-task(s) claimed by admin node(s) %s, no longer alive: %d held by their executors "
            "(taken over), %d dispatched again", ", ".join(nodes), len(held), len(lost),
        )
        if not lost:
            return 0
        updates = [
            TaskUpdate(o.id, Lost(o.attempt), message=f"admin node {o.node} that dispatched it died: {why}")
            for o, why in lost
        ]
        changed, ended = await self._store.distributed.apply(updates, self._clock.now_ms())
        self.resent += changed
        if ended:
            await self._ended(ended)
        return changed
