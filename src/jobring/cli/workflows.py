"""`jobring workflows ...`: define, trigger, observe and repair workflows on a running admin."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jobring.cli.common import UsageError
from jobring.cli.remote import (
    group_parser,
    instant_text,
    positive_int,
    print_json,
    print_page_json,
    print_result,
    print_table,
    remote_parser,
    run_remote,
)
from jobring.client import AdminClient
from jobring.core.timefmt import iso_ms

RUN_STATES = ("running", "success", "failed", "stopped")

_WORKFLOW_COLUMNS = (
    ("ID", "id"),
    ("NAME", "name"),
    ("GROUP", "job_group"),
    ("VERSION", "version"),
    ("NODES", lambda w: len(w.get("nodes", []))),
)


def _ms_text(value: Any) -> str | None:
    # The workflow API gives epoch milliseconds (instant_text reads ISO text).
    return instant_text(iso_ms(value)) if isinstance(value, int) and not isinstance(value, bool) else None


_RUN_COLUMNS = (
    ("ID", "id"),
    ("WORKFLOW", "workflow_id"),
    ("VERSION", "version"),
    ("STATE", "state"),
    ("STARTED (UTC)", lambda r: _ms_text(r.get("started_at"))),
    ("ENDED (UTC)", lambda r: _ms_text(r.get("ended_at"))),
    ("BY", "triggered_by"),
)

def _node_target(node: Mapping[str, Any]) -> Any:
    """A node's job, or a sub-workflow node's workflow."""
    return f"workflow {node['workflow_id']}" if node.get("workflow_id") else node.get("job_id")


def _node_run(node: Mapping[str, Any]) -> Any:
    """A node's job run, or a sub-workflow node's workflow run (``run-show`` it)."""
    if node.get("workflow_id") and node.get("run_id"):
        return f"workflow run {node['run_id']}"
    return node.get("run_id")


_NODE_COLUMNS = (
    ("NODE", "key"),
    ("STATE", lambda n: n["state"] + (f" ({n['skip_reason']})" if n.get("skip_reason") else "")),
    ("JOB", _node_target),
    ("RUN", _node_run),
    ("TRY", "attempt"),
    ("STARTED (UTC)", lambda n: _ms_text(n.get("started_at"))),
    ("DURATION", lambda n: f"{n['duration_ms']}ms" if isinstance(n.get("duration_ms"), int) else None),
    ("MESSAGE", lambda n: (n.get("message") or "")[:60]),
)


def _read_definition(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text(encoding="utf-8") if path != "-" else sys.stdin.read()
    except OSError as exc:
        raise UsageError(f"--file: cannot read {path}: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--file: {path} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"--file: {path} must hold a JSON object (name, job_group, nodes, edges)")
    return doc


def _params(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--params: not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UsageError("--params: must be a JSON object")
    return value


def _print_run(run: Mapping[str, Any]) -> None:
    head = f"workflow run {run['id']} of workflow {run['workflow_id']} (version {run['version']})"
    print(f"{head}: {run['state']}" + (f" - {run['message']}" if run.get("message") else ""))
    if run.get("parent_run_id"):
        print(f"a sub-workflow run of workflow run {run['parent_run_id']} (repair that run)")
    print(f"round {run['round']}, started {_ms_text(run['started_at'])}"
          + (f", ended {_ms_text(run['ended_at'])}" if run.get("ended_at") else ""))
    print_table(run["nodes"], _NODE_COLUMNS)


def _list(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        page = admin.workflows.list(limit=args.limit)
        if args.json:
            print_page_json(page)
        else:
            print_table(page.items, _WORKFLOW_COLUMNS)
        return 0
    return run_remote(args, action)


def _show(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        workflow = admin.workflows.get(args.workflow_id)
        if args.json:
            print_json(workflow)
            return 0
        declared = ", declared in code" if workflow.get("managed_by") == "code" else ""
        print(f"workflow {workflow['id']} {workflow['name']!r} (group {workflow['job_group']}, "
              f"version {workflow['version']}{declared})")
        print_table(workflow["nodes"], (("NODE", "key"), ("KIND", lambda n: n.get("kind", "job")),
                                         ("JOB", _node_target),
                                         ("JOIN", lambda n: n.get("join", "all_success")),
                                         ("ON FAILURE", lambda n: n.get("on_failure", "stop"))))
        for edge in workflow["edges"]:
            when = f"  when {edge['when']}" if "when" in edge else ("  else" if edge.get("else") else "")
            print(f"{edge['from']} -> {edge['to']}{when}")
        return 0
    return run_remote(args, action)


def _create(args: argparse.Namespace) -> int:
    definition = _read_definition(args.file)

    def action(admin: AdminClient) -> int:
        created = admin.workflows.create(definition)
        if args.json:
            print_json(created)
        else:
            nodes = len(created["nodes"])
            print(f"created workflow {created['id']} ({nodes} nodes, version {created['version']})")
        return 0
    return run_remote(args, action)


def _validate(args: argparse.Namespace) -> int:
    definition = _read_definition(args.file)

    def action(admin: AdminClient) -> int:
        # A refusal is the save's own (exit 2 with the API's message, naming the field and node).
        checked = admin.workflows.validate(definition, workflow_id=args.workflow)
        if args.json:
            print_json(checked)
            return 0
        as_edit = f" as a new version of workflow {args.workflow}" if args.workflow else ""
        nodes, edges = checked["nodes"], checked["edges"]
        print(f"OK{as_edit}: {nodes} node{'s' * (nodes != 1)}, {edges} edge{'s' * (edges != 1)}, "
              f"starting at {', '.join(checked['roots'])}")
        print(f"order: {', '.join(checked['order'])}")
        return 0
    return run_remote(args, action)


def _update(args: argparse.Namespace) -> int:
    definition = _read_definition(args.file)

    def action(admin: AdminClient) -> int:
        saved = admin.workflows.update(args.workflow_id, definition)
        print_result(args, saved, f"saved workflow {saved['id']} as version {saved['version']}")
        return 0
    return run_remote(args, action)


def _delete(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        admin.workflows.delete(args.workflow_id)
        print(f"deleted workflow {args.workflow_id}")
        return 0
    return run_remote(args, action)


def _trigger(args: argparse.Namespace) -> int:
    params = _params(args.params)

    def action(admin: AdminClient) -> int:
        started = admin.workflows.trigger(args.workflow_id, params, force=args.force)
        print_result(args, started, f"started workflow run {started['workflow_run_id']}")
        return 0
    return run_remote(args, action)


_SCHEDULE_FIELDS = ("schedule_type", "schedule_conf", "schedule_timezone", "misfire_strategy", "overlap",
                    "params", "enabled")


def _schedule_changes(args: argparse.Namespace) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if args.cron is not None:
        changes.update(schedule_type="CRON", schedule_conf=args.cron)
    elif args.fix_rate is not None:
        changes.update(schedule_type="FIX_RATE", schedule_conf=str(args.fix_rate))
    elif args.once is not None:
        changes.update(schedule_type="ONCE", schedule_conf=args.once)
    elif args.manual:
        changes.update(schedule_type="NONE", schedule_conf="", enabled=False)
    if args.tz is not None:
        changes["schedule_timezone"] = args.tz or None
    if args.misfire is not None:
        changes["misfire_strategy"] = args.misfire
    if args.overlap is not None:
        changes["overlap"] = args.overlap
    if args.params is not None:
        changes["params"] = _params(args.params)
    if args.start or args.stop:
        changes["enabled"] = bool(args.start)
    return changes


def _print_schedule(schedule: Mapping[str, Any]) -> None:
    kind = schedule["schedule_type"]
    what = "manual only" if kind == "NONE" else f"{kind} {schedule['schedule_conf']}"
    zone = schedule.get("schedule_timezone") or "the admin's time zone"
    state = "started" if schedule["enabled"] else "stopped"
    print(f"workflow {schedule['workflow_id']}: {what} ({zone}), {state}; misfire "
          f"{schedule['misfire_strategy']}, overlap {schedule['overlap']}")
    if schedule.get("next_fire_at"):
        print(f"next fire {_ms_text(schedule['next_fire_at'])}")
    if schedule.get("spent"):
        print("spent: its one fire is over (set another time to plan it again)")
    if schedule.get("queued"):
        print("a fire is waiting for the running run to end")
    if schedule.get("last_result"):
        print(f"last: {schedule['last_result']}")


def _schedule(args: argparse.Namespace) -> int:
    changes = _schedule_changes(args)

    def action(admin: AdminClient) -> int:
        schedule = admin.workflows.schedule(args.workflow_id)
        if changes:
            body = {name: schedule[name] for name in _SCHEDULE_FIELDS} | changes
            schedule = admin.workflows.set_schedule(args.workflow_id, body)
        if args.json:
            print_json(schedule)
        else:
            _print_schedule(schedule)
        return 0
    return run_remote(args, action)


def _runs(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        page = admin.workflows.runs(workflow=args.workflow, state=args.state, limit=args.limit)
        if args.json:
            print_page_json(page)
        else:
            print_table(page.items, _RUN_COLUMNS)
        return 0
    return run_remote(args, action)


def _run_show(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        run = admin.workflows.run(args.run_id)
        if args.json:
            print_json(run)
        else:
            _print_run(run)
        return 0
    return run_remote(args, action)


def _repair(name: str) -> Any:
    def handler(args: argparse.Namespace) -> int:
        def action(admin: AdminClient) -> int:
            if name == "retry":
                run = admin.workflows.retry(args.run_id, round=args.round)
            elif name == "stop":
                run = admin.workflows.stop(args.run_id, round=args.round)
            elif name == "mark-succeeded":
                run = admin.workflows.mark_succeeded(args.run_id, args.node, round=args.round)
            else:
                run = admin.workflows.rerun_from(args.run_id, args.node, round=args.round)
            if args.json:
                print_json(run)
            else:
                _print_run(run)
            return 0
        return run_remote(args, action)
    return handler


def register(sub: Any) -> None:
    """Add this module's commands to the top-level parser."""
    _, commands = group_parser(sub, "workflows",
                               "define, trigger, observe and repair workflows on a running admin")

    listing = remote_parser(commands, "list", "list workflows, newest first")
    listing.add_argument("--limit", type=positive_int, default=50, metavar="N", help="at most N (default 50)")
    listing.set_defaults(handler=_list)

    show = remote_parser(commands, "show", "one workflow: its nodes and edges")
    show.add_argument("workflow_id", type=positive_int, metavar="WORKFLOW_ID")
    show.set_defaults(handler=_show)

    create = remote_parser(commands, "create", "create a workflow from a JSON file")
    create.add_argument("--file", required=True, metavar="PATH",
                        help='{"name", "job_group", "nodes", "edges"} (see docs/workflows.md); - reads stdin')
    create.set_defaults(handler=_create)

    validate = remote_parser(commands, "validate",
                             "check a JSON file as create (or update) would, saving nothing")
    validate.add_argument("--file", required=True, metavar="PATH", help="as for create; - reads stdin")
    validate.add_argument("--workflow", type=positive_int, metavar="ID",
                          help="check it as a new version of this workflow (as update would)")
    validate.set_defaults(handler=_validate)

    update = remote_parser(commands, "update", "save a new version of a workflow from a JSON file")
    update.add_argument("workflow_id", type=positive_int, metavar="WORKFLOW_ID")
    update.add_argument("--file", required=True, metavar="PATH", help="as for create; - reads stdin")
    update.set_defaults(handler=_update)

    remove = remote_parser(commands, "delete", "delete a workflow and its runs", json_output=False)
    remove.add_argument("workflow_id", type=positive_int, metavar="WORKFLOW_ID")
    remove.set_defaults(handler=_delete)

    trigger = remote_parser(commands, "trigger", "start a run now")
    trigger.add_argument("workflow_id", type=positive_int, metavar="WORKFLOW_ID")
    trigger.add_argument("--params", metavar="JSON", help="the run's starting context, a JSON object")
    trigger.add_argument("--force", action="store_true",
                         help="start even while a run is going (overlap skip or queue_one refuses it)")
    trigger.set_defaults(handler=_trigger)

    schedule = remote_parser(commands, "schedule", "show or set when a workflow runs by itself")
    schedule.add_argument("workflow_id", type=positive_int, metavar="WORKFLOW_ID")
    kind = schedule.add_mutually_exclusive_group()
    kind.add_argument("--cron", metavar="EXPR", help='a cron expression, e.g. "0 0 2 * * ?"')
    kind.add_argument("--fix-rate", type=positive_int, metavar="SECONDS", help="every SECONDS seconds")
    kind.add_argument("--once", metavar="DATETIME",
                      help='once, at "2026-12-01 02:00" in --tz (or with its own offset, "...+08:00")')
    kind.add_argument("--manual", action="store_true", help="no schedule (trigger only)")
    schedule.add_argument("--tz", metavar="ZONE",
                          help="IANA time zone of a cron or one-shot schedule ('': the admin's)")
    schedule.add_argument("--misfire", choices=("DO_NOTHING", "FIRE_ONCE_NOW"),
                          help="a fire missed by more than 5 s")
    schedule.add_argument("--overlap", choices=("skip", "queue_one", "allow"),
                          help="a fire while a run is going: skip (default), queue one, allow")
    schedule.add_argument("--params", metavar="JSON", help="the scheduled runs' starting context")
    switch = schedule.add_mutually_exclusive_group()
    switch.add_argument("--start", action="store_true", help="start the schedule")
    switch.add_argument("--stop", action="store_true", help="stop the schedule")
    schedule.set_defaults(handler=_schedule)

    runs = remote_parser(commands, "runs", "list workflow runs, newest first")
    runs.add_argument("--workflow", type=positive_int, metavar="ID", help="only runs of this workflow")
    runs.add_argument("--state", choices=RUN_STATES, help="only runs in this state")
    runs.add_argument("--limit", type=positive_int, default=20, metavar="N", help="at most N (default 20)")
    runs.set_defaults(handler=_runs)

    run_show = remote_parser(commands, "run-show", "one workflow run with its nodes")
    run_show.add_argument("run_id", type=positive_int, metavar="RUN_ID")
    run_show.set_defaults(handler=_run_show)

    for name, help_text, with_node in (
        ("retry", "retry a failed or stopped run from its failed nodes", False),
        ("stop", "stop a running run (kills its running nodes)", False),
        ("mark-succeeded", "take a failed node as succeeded and let the run go on", True),
        ("rerun", "run an ended run again from a node", True),
    ):
        repair = remote_parser(commands, name, help_text)
        repair.add_argument("run_id", type=positive_int, metavar="RUN_ID")
        if with_node:
            repair.add_argument("node", metavar="NODE_KEY")
        repair.add_argument("--round", type=int, default=None, metavar="N",
                            help="the run's round as last shown (a repeated repair is then refused)")
        repair.set_defaults(handler=_repair(name))
