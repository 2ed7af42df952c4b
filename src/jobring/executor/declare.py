"""Jobs declared in code: ``@executor.job("nightly", cron="0 0 2 * * ?", retries=2)``, and
workflows of those jobs: ``executor.workflow("nightly", nodes=[{"key": "a", "job": "extract"}])``.

After the executor registered, it sends its declarations once to the admin's jobring
extension ``api/jobring/declareJobs`` (the admin creates or updates the group's jobs, see
``jobring.admin.api.management.declared``). An admin without the extension (XXL-JOB)
answers 404, a redirect to its login page or "uri-mapping not found": the address is
remembered and not asked again. A refused declaration (e.g. a bad cron expression) is
logged once as an error naming the handler and field; a declaration the admin skipped
(the handler's job is managed in the console) as a warning; unreachable admins (and 5xx)
are retried with backoff.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import orjson

from jobring.executor.callback import admin_headers

log = logging.getLogger(__name__)

DECLARE_API = "api/jobring/declareJobs"
_MAX_BACKOFF_S = 60.0

# Keyword of @executor.job -> the admin's job field.
_FIELD_NAMES = {
    "desc": "job_desc",
    "timezone": "schedule_timezone",
    "params": "executor_param",
    "route": "executor_route_strategy",
    "timeout": "executor_timeout",
    "retries": "executor_fail_retry_count",
    "block": "executor_block_strategy",
    "misfire": "misfire_strategy",
    "alarm_email": "alarm_email",
    "child_jobs": "child_job_ids",
    "author": "author",
}


def declaration(
    handler: str, *, cron: str | None, fix_rate: int | None, start: bool, options: Mapping[str, Any],
    more: Mapping[str, Any],
) -> dict[str, Any] | None:
    """The declaration of one handler for the admin, or None when it declares nothing.

    ``options``: the keywords of :data:`_FIELD_NAMES` (None: not declared); ``more``: further
    job fields by the admin's names (``{"executor_param": ...}``), checked by the admin.
    """
    if cron is not None and fix_rate is not None:
        raise ValueError(f"job handler [{handler}]: give cron or fix_rate, not both")
    fields: dict[str, Any] = {}
    if cron is not None:
        fields.update(schedule_type="CRON", schedule_conf=str(cron))
    if fix_rate is not None:
        if isinstance(fix_rate, bool) or not isinstance(fix_rate, int) or fix_rate <= 0:
            raise ValueError(f"job handler [{handler}]: fix_rate must be a positive number of seconds")
        fields.update(schedule_type="FIX_RATE", schedule_conf=str(fix_rate))
    for keyword, value in options.items():
        if value is None:
            continue
        if keyword == "alarm_email" and not isinstance(value, str):
            value = ",".join(value)
        if keyword == "child_jobs":
            value = list(value)
        if keyword in ("route", "block", "misfire"):
            value = str(getattr(value, "value", value)).upper()
        fields[_FIELD_NAMES[keyword]] = value
    fields.update({k: v for k, v in more.items() if v is not None})
    if not fields and start:
        return None
    return {"handler": handler, "fields": fields, "start": start}


_NODE_IDS = ("job_id", "workflow_id")


def workflow_declaration(
    name: str,
    nodes: Sequence[Mapping[str, Any]],
    edges: Sequence[Mapping[str, Any]],
    description: str,
    schedule: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A workflow declared next to the jobs: its nodes name their job by this executor's
    handler (``"job": "extract"``) and a sub-workflow by a workflow name of the group
    (``"workflow": "nightly-part"``, declared before it); everything else is the API's node
    (docs/workflows.md). The admin checks the rest and refuses naming the workflow and node."""
    if not isinstance(name, str) or not name.strip() or len(name) > 100 or "\n" in name:
        raise ValueError(f"workflow {name!r}: the name must be one line of 1-100 characters")
    if isinstance(nodes, str | bytes) or not nodes or not all(isinstance(n, Mapping) for n in nodes):
        raise ValueError(f"workflow {name!r}: nodes must be a non-empty list of objects")
    if isinstance(edges, str | bytes) or not all(isinstance(e, Mapping) for e in edges):
        raise ValueError(f"workflow {name!r}: edges must be a list of objects")
    for node in nodes:
        for field in _NODE_IDS:
            if field in node:
                raise ValueError(f"workflow {name!r}, node {node.get('key')!r}: {field} is not declared in "
                                 "code (ids differ between admins): name the handler (job) or the workflow")
    declared: dict[str, Any] = {"name": name, "description": str(description),
                                "nodes": [dict(n) for n in nodes], "edges": [dict(e) for e in edges]}
    if schedule is not None:
        declared["schedule"] = dict(schedule)
    return declared


def workflow_schedule_declaration(
    name: str,
    *,
    cron: str | None,
    fix_rate: int | None,
    once: str | None,
    timezone: str | None,
    misfire: str | None,
    overlap: str | None,
    params: Mapping[str, Any] | None,
    start: bool,
) -> dict[str, Any] | None:
    """A declared workflow's ``schedule`` (the fields of ``PUT /workflows/{id}/schedule``), or
    None when the code declares none (then the workflow runs only when triggered, or on a
    schedule set in the console)."""
    given = [k for k, v in (("cron", cron), ("fix_rate", fix_rate), ("once", once)) if v is not None]
    if len(given) > 1:
        raise ValueError(f"workflow {name!r}: give one of cron, fix_rate or once, not {' and '.join(given)}")
    if not given:
        if any(v is not None for v in (timezone, misfire, overlap, params)):
            raise ValueError(f"workflow {name!r}: timezone, misfire, overlap and params need cron, "
                             "fix_rate or once")
        return None
    bad_rate = isinstance(fix_rate, bool) or not isinstance(fix_rate, int) or fix_rate <= 0
    if fix_rate is not None and bad_rate:
        raise ValueError(f"workflow {name!r}: fix_rate must be a positive number of seconds")
    kinds = {"cron": ("CRON", cron), "fix_rate": ("FIX_RATE", fix_rate), "once": ("ONCE", once)}
    kind, conf = kinds[given[0]]
    schedule: dict[str, Any] = {"schedule_type": kind, "schedule_conf": str(conf), "enabled": bool(start)}
    if timezone is not None:
        schedule["schedule_timezone"] = timezone
    if misfire is not None:
        schedule["misfire_strategy"] = str(getattr(misfire, "value", misfire)).upper()
    if overlap is not None:
        schedule["overlap"] = str(overlap)
    if params is not None:
        schedule["params"] = dict(params)
    return schedule


def workflow_handlers(workflows: Sequence[Mapping[str, Any]]) -> set[str]:
    """The handlers the declared workflows' nodes run."""
    return {str(node["job"]) for wf in workflows for node in wf["nodes"] if isinstance(node.get("job"), str)}


def declaration_body(
    app_name: str, declarations: Sequence[Mapping[str, Any]], workflows: Sequence[Mapping[str, Any]] = ()
) -> bytes:
    """The request body: the jobs (by handler) and the workflows (in declaration order: a
    sub-workflow is declared before the workflows that run it)."""
    ordered = sorted(declarations, key=lambda d: str(d["handler"]))
    flows = list(workflows)
    digest = hashlib.sha256(orjson.dumps([ordered, flows], option=orjson.OPT_SORT_KEYS)).hexdigest()
    return orjson.dumps({"appname": app_name, "declarations": ordered, "workflows": flows,
                         "declaration_hash": digest})


class Declarer:
    """Sends the declarations once per start (see the module docstring)."""

    def __init__(
        self, client: httpx.AsyncClient, admin_urls: Sequence[str], access_token: str | None, body: bytes,
    ) -> None:
        self._client = client
        self._admin_urls = list(admin_urls)
        self._headers = admin_headers(access_token)
        self._body = body
        # Admin addresses without the extension: not asked again by this process.
        self.unsupported: set[str] = set()
        self.outcome: str | None = None  # "applied", "refused", "unsupported", "waiting" (no group yet)
        self.answer: dict[str, Any] | None = None

    async def run(self, registered: asyncio.Event) -> None:
        """Wait for the registration, then send until an admin answered (retrying with backoff)."""
        backoff = 1.0
        while True:
            await registered.wait()
            if await self.send_once():
                return
            if self.outcome != "waiting":
                log.warning("declaring jobs failed on every admin; retry in %.0f s", backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF_S)

    async def send_once(self) -> bool:
        """Try each admin in order; True once one has answered for good."""
        for base in self._admin_urls:
            if base in self.unsupported:
                continue
            url = base + DECLARE_API
            try:
                response = await self._client.post(url, content=self._body, headers=self._headers)
            except httpx.HTTPError as exc:
                log.warning("declaring jobs at %s failed: %s: %s", url, type(exc).__name__, exc)
                continue
            if response.status_code >= 500:
                log.warning("declaring jobs at %s: HTTP %d", url, response.status_code)
                continue
            try:
                answer = orjson.loads(response.content)
            except orjson.JSONDecodeError:
                answer = None
            if response.status_code != 200 or not isinstance(answer, dict):
                # 404, or an XXL-JOB admin's redirect to its login page: no such endpoint there.
                self._mark_unsupported(base, f"HTTP {response.status_code}")
                continue
            self.answer = answer
            msg = str(answer.get("msg") or "")
            if answer.get("code") == 200:
                self.outcome = "applied"
                log.info("jobs declared at %s: %s", base, answer.get("content"))
                _warn_skipped(answer.get("content"))
                return True
            if "not found" in msg and "uri-mapping" in msg:  # XXL-JOB's unknown api/<uri>
                self._mark_unsupported(base, msg)
                continue
            content = answer.get("content")
            if isinstance(content, dict) and content.get("field") == "appname":
                # The executor group may be created later: ask again (one warning).
                if self.outcome != "waiting":
                    log.warning("jobs declared in code not applied yet: %s; retrying", msg)
                self.outcome = "waiting"
                return False
            self.outcome = "refused"
            log.error("the admin refused the jobs declared in code: %s", msg)
            return True
        if self._admin_urls and len(self.unsupported) == len(set(self._admin_urls)):
            self.outcome = "unsupported"
            return True
        return False

    def _mark_unsupported(self, base: str, why: str) -> None:
        self.unsupported.add(base)
        log.debug("admin %s does not take declared jobs (%s); not asked again", base, why)


def _warn_skipped(content: Any) -> None:
    """One warning per declaration the admin skipped (its handler's job is the console's)."""
    skipped = content.get("skipped") if isinstance(content, dict) else None
    for item in skipped if isinstance(skipped, list) else []:
        if isinstance(item, dict):
            log.warning("job of handler %s not declared: %s", item.get("handler"), item.get("reason"))
