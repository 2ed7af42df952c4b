"""`jobring settings` (the admin's settings, the executor token) and `jobring dashboard`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from jobring.cli.remote import (
    add_connection_args,
    add_json_arg,
    group_parser,
    positive_int,
    print_json,
    print_table,
    remote_parser,
    run_remote,
)
from jobring.client import AdminClient

CHART_WIDTH = 40


def _show(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        settings = admin.settings.get()
        if args.json:
            print_json(settings)
            return 0
        rows = [{"setting": key, "value": value} for key, value in settings.items()]
        print_table(rows, (("SETTING", "setting"), ("VALUE", "value")))
        return 0

    return run_remote(args, action)


def _token(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        token = admin.settings.access_token()
        if token is None and not args.json:
            print("jobring: error: the global executor token is off (JOBRING_ACCESS_TOKEN unset): "
                  "executors use their group's token, `jobring groups token APPNAME`", file=sys.stderr)
            return 1
        if args.json:
            print_json({"access_token": token})
        else:
            # Alone on stdout: `T=$(jobring settings token) && export JOBRING_EXECUTOR_ACCESS_TOKEN="$T"`.
            print(token)
        return 0

    return run_remote(args, action)


def _bar(day: Mapping[str, Any], scale: float) -> str:
    parts = (("#", day.get("success", 0)), ("x", day.get("fail", 0)), (".", day.get("running", 0)))
    return "".join(mark * round(int(count) * scale) for mark, count in parts)


def _dashboard(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        board = admin.dashboard.get(days=args.days)
        if args.json:
            print_json(board)
            return 0
        print(f"jobs: {board['job_count']}   executors online: {board['executor_count']}")
        print(f"runs today: {board['runs_today']} ({board['runs_today_success']} succeeded, "
              f"{board['runs_today_fail']} failed, {board['runs_today_running']} running)")
        chart = board.get("chart") or []
        totals = [int(d["success"]) + int(d["fail"]) + int(d["running"]) for d in chart]
        peak = max(totals, default=0)
        scale = CHART_WIDTH / peak if peak > CHART_WIDTH else 1.0
        print(f"\nruns per day (UTC; # success, x fail, . running{'' if scale == 1 else ', scaled'}):")
        for day, total in zip(chart, totals, strict=True):
            print(f"{day['day']}  {total:>7}  {_bar(day, scale)}")
        return 0

    return run_remote(args, action)


def register(sub: Any) -> None:
    """Add this module's commands to the top-level parser."""
    parser, commands = group_parser(sub, "settings", "the admin's settings and the executor access token")
    # `jobring settings` alone shows the settings, as `jobring settings show` does.
    add_connection_args(parser)
    add_json_arg(parser)
    parser.set_defaults(handler=_show)
    remote_parser(commands, "show", "show the admin's settings (admin)").set_defaults(handler=_show)

    token = remote_parser(commands, "token", "print the executor access token (admin)")
    token.set_defaults(handler=_token)

    dashboard = remote_parser(sub, "dashboard", "counts of jobs, executors and runs, and runs per day")
    dashboard.add_argument("--days", type=positive_int, default=7, metavar="N", help="chart length (1-90)")
    dashboard.set_defaults(handler=_dashboard)
