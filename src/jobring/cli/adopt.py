"""`jobring db adopt`: the guided adoption of an XXL-JOB database (report, zone, token, upgrade)."""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

from jobring.admin.security.secrets_policy import access_token_problem
from jobring.admin.services.adopt import AdoptionReport, gather_report, record_adoption
from jobring.admin.store import Store, create_engine, upgrade_database
from jobring.admin.store.migrate import current_revision
from jobring.admin.store.xxl_schema import AdoptionRefused
from jobring.admin.store.zones import set_database_zone, zone_named
from jobring.cli.common import EXIT_USAGE

EXIT_REFUSED = 1


def _when(report: AdoptionReport) -> str:
    if report.oldest_log is None or report.newest_log is None:
        return ""
    # str(): SQLite hands raw text back for a plain SELECT; the others datetimes.
    return f" from {str(report.oldest_log)[:16]} to {str(report.newest_log)[:16]} (as stored)"


def print_report(report: AdoptionReport, out: TextIO) -> None:
    """The report an operator reads before adopting."""
    f = report.finding
    types = ", ".join(f"{k} {n}" for k, n in sorted(report.jobs_by_type.items())) or "none"
    lines = [
        f"XXL-JOB schema: {f.version}" + ("" if f.adoptable else " (cannot be adopted)"),
        f"jobring schema revision: {report.jobring_revision or 'none (not adopted yet)'}",
        f"executor groups: {len(report.groups)}"
        + (f" ({', '.join(report.groups[:20])})" if report.groups else ""),
        f"jobs: {report.jobs} ({report.running_jobs} running; by schedule type: {types}; "
        f"{report.glue_jobs} GLUE, {report.glue_versions} saved GLUE versions)",
        f"users: {report.users} ({report.admins} admin; {report.md5_users} with only an XXL-JOB password)",
        f"run logs: {report.logs}{_when(report)}; {report.in_flight_runs} still 'running', "
        f"{report.unalarmed_failures} failed and not yet alarmed",
        f"executor registrations: {report.registry_rows}",
    ]
    if report.server_zone:
        lines.append(f"database server time zone: {report.server_zone}")
    if report.stored_zone:
        lines.append(f"database_timezone already recorded: {report.stored_zone}")
    for line in lines:
        print(line, file=out)
    for problem in f.problems:
        print(f"  - {problem}", file=out)


def token_advice(old_token: str | None) -> list[str]:
    """How the executors keep working with jobring (their token is theirs, never stored here)."""
    move = (
        "Later, move group by group to per-group tokens: `jobring groups token APPNAME --rotate` "
        "creates and prints the group's own token, which from then on is the only one that group "
        "accepts: set it as xxl.job.accessToken on that group's executors right away."
    )
    if old_token is None:
        return [
            "Executors: pass --executor-token with XXL-JOB's xxl.job.accessToken to get advice. "
            "Java and Python executors keep working unchanged when the admin runs with "
            "JOBRING_ACCESS_TOKEN set to their token (if it is strong). " + move,
        ]
    problem = access_token_problem(old_token)
    if problem is None:
        return [
            "Executors: their token is strong enough. Start jobring with JOBRING_ACCESS_TOKEN set to it "
            "(the explicit global token) and Java/Python executors keep working unchanged. " + move,
        ]
    return [
        f"Executors: their token {problem} and jobring refuses it (XXL-JOB's default_token is public).",
        "Move them to a new token: generate one",
        "(python3 -c 'import secrets; print(secrets.token_urlsafe(32))'),",
        "set it as xxl.job.accessToken in XXL-JOB's admin and on every executor, restart them (XXL-JOB keeps",
        "working with it), then start jobring with JOBRING_ACCESS_TOKEN set to it. " + move,
    ]


def _ask_zone(report: AdoptionReport) -> str | None:
    if not sys.stdin.isatty():
        return None
    hint = f" [server: {report.server_zone}]" if report.server_zone else ""
    answer = input(f"Time zone XXL-JOB wrote its DATETIME columns in (its JDBC serverTimezone){hint}: ")
    return answer.strip() or None


async def _gather(url: str) -> AdoptionReport:
    engine = create_engine(url)
    try:
        revision = await current_revision(engine)
        async with engine.connect() as conn:
            return await conn.run_sync(gather_report, revision)
    finally:
        await engine.dispose()


async def _apply(url: str, report: AdoptionReport, zone_name: str, now_ms: int) -> dict[str, str]:
    from jobring.admin.services.audit import Actor, ActorKind, AuditAction, AuditLog
    from jobring.core.clock import SystemClock

    engine = create_engine(url)
    try:
        await upgrade_database(engine)
        set_database_zone(engine, zone_named(zone_name))
        store = Store(engine)
        stored = await record_adoption(store, report, zone_name, now_ms)
        await AuditLog(store, SystemClock()).record(
            Actor("cli (offline)", ActorKind.SYSTEM),
            AuditAction.SETTINGS_CHANGE,
            target_type="database",
            details={"adopted_from_xxl_job": report.finding.version, **stored},
        )
        return stored
    finally:
        await engine.dispose()


def run(
    url: str, zone: str | None, old_token: str | None, *, dry_run: bool, out: TextIO | None = None
) -> int:
    """The whole adoption; returns the exit code."""
    import time

    out = out or sys.stdout
    report = asyncio.run(_gather(url))
    if not report.finding.is_xxl_job:
        print("jobring: no XXL-JOB tables here; for a new database use `jobring db upgrade`", file=sys.stderr)
        return EXIT_USAGE
    print_report(report, out)
    if not report.finding.adoptable:
        print("jobring: cannot adopt this database; nothing was changed", file=sys.stderr)
        return EXIT_REFUSED
    if zone is not None and report.stored_zone is not None and zone != report.stored_zone:
        print(
            f"jobring: this database was adopted with database_timezone {report.stored_zone}; "
            f"refusing {zone} (its DATETIME values would be misread)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    zone = zone or report.stored_zone or (None if dry_run else _ask_zone(report))
    if zone is not None:
        try:
            zone_named(zone)
        except ValueError as exc:
            print(f"jobring: error: --database-timezone: {exc}", file=sys.stderr)
            return EXIT_USAGE
    for line in token_advice(old_token):
        print(line, file=out)
    if dry_run:
        print("dry run: nothing was changed", file=out)
        return 0
    if zone is None:
        print(
            "jobring: error: --database-timezone is required (the zone XXL-JOB wrote its times in: "
            "serverTimezone of its JDBC URL, e.g. Asia/Shanghai; UTC if it ran in UTC)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        stored = asyncio.run(_apply(url, report, zone, int(time.time() * 1000)))
    except AdoptionRefused as exc:
        print(f"jobring: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    print(
        f"adopted: schema upgraded; database_timezone {stored['database_timezone']}, crons default to "
        f"{stored['default_timezone']} (JOBRING_TIMEZONE overrides); runs up to id "
        f"{stored['adopted_log_id_max']} are XXL-JOB history (never marked lost or retried).",
        file=out,
    )
    print(
        "Old run logs are kept until you set JOBRING_LOG_RETENTION_CONFIRM=true "
        "(JOBRING_LOG_RETENTION_DAYS applies from then on).",
        file=out,
    )
    print(
        "Users log in once with their XXL-JOB password and must then pick a new one; "
        "`jobring users reset-password NAME --offline` works without a running admin.",
        file=out,
    )
    print(
        "Stop XXL-JOB's admin before starting jobring (it refuses to schedule while the Java "
        "admin is alive unless started with --takeover); see docs/migrating-from-xxl-job.md.",
        file=out,
    )
    return 0
