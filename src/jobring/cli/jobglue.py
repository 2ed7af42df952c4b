"""`jobring jobs glue ID`: a GLUE (script) job's source: show it, save a new version, list
the versions, restore one (the API's /jobs/{id}/glue)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from jobring.cli.common import UsageError
from jobring.cli.jobfields import read_source
from jobring.cli.remote import (
    instant_text,
    positive_int,
    print_json,
    print_result,
    print_table,
    remote_parser,
    run_remote,
)
from jobring.client import AdminClient


def _glue(args: argparse.Namespace) -> int:
    chosen = [name for name in ("set", "history", "restore") if getattr(args, name)]
    if len(chosen) > 1:
        raise UsageError("--set, --history and --restore exclude each other")
    if bool(args.remark and args.remark.strip()) != bool(args.set):
        raise UsageError("--set and --remark go together (a saved version says what changed)")
    source = read_source(args.set) if args.set else None  # read before anything is sent

    def action(admin: AdminClient) -> int:
        if args.history:
            versions = admin.glue.history(args.job_id)
            if args.json:
                print_json(versions)
            else:
                print_table(versions, (("VERSION", "id"), ("TYPE", "glue_type"), ("REMARK", "glue_remark"),
                                       ("SAVED (UTC)", lambda v: instant_text(v.get("add_time")))))
            return 0
        if args.restore:
            glue = admin.glue.restore(args.job_id, args.restore)
            message = f"job {args.job_id}: version {args.restore} restored"
        elif source is not None:
            glue = admin.glue.save(args.job_id, source, args.remark)
            message = f"job {args.job_id}: new GLUE source saved ({len(source)} characters)"
        else:
            glue = admin.glue.get(args.job_id)
            if not args.json:
                text = str(glue.get("glue_source") or "")
                sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
                return 0
            message = ""
        print_result(args, glue, message)
        return 0

    return run_remote(args, action)


def register_glue(commands: Any) -> None:
    """`jobs glue` under the `jobs` command group."""
    glue = remote_parser(commands, "glue", "a GLUE job's script: print it, or save (--set), list "
                                           "(--history) or restore (--restore) versions")
    glue.add_argument("job_id", type=positive_int, metavar="ID")
    glue.add_argument("--set", metavar="FILE", help="save FILE ('-': standard input) as the new source")
    glue.add_argument("--remark", metavar="TEXT", help="with --set (required): what changed")
    glue.add_argument("--history", action="store_true", help="the saved versions, newest first")
    glue.add_argument("--restore", type=positive_int, metavar="VERSION",
                      help="make this saved version the current source")
    glue.set_defaults(handler=_glue)
