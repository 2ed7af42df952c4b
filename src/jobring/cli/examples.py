"""The example at the end of every command's ``--help``, kept in one place."""

from __future__ import annotations

import argparse

EXAMPLES: dict[str, str] = {
    "": "make run  (or: jobring run)\n  jobring jobs list\n  jobring runs list --job 1",
    "admin": "jobring admin --database-url postgresql://postgres@127.0.0.1/jobring --port 8080",
    "run": "jobring run --port 8081 --demo-port 9997",
    "cron": 'jobring cron next "0 0 2 * * ?" --tz Europe/Berlin',
    "cron next": 'jobring cron next "0 15 10 ? * MON-FRI" --tz Europe/Berlin --count 3',
    "db": "jobring db upgrade --database-url postgresql://postgres@127.0.0.1/jobring",
    "db upgrade": "jobring db upgrade --database-url postgresql://postgres@127.0.0.1/jobring",
    "db current": "jobring db current --database-url sqlite:///./jobring.db",
    "db adopt": "jobring db adopt --database-url mysql://xxl:pw@db/xxl_job --database-timezone Asia/Shanghai",
    "executor": "jobring executor jobs:executor --admin http://127.0.0.1:8080/xxl-job-admin/ --port 9998",
    "jobs": "jobring jobs add --group my-app --desc hello --handler hello --fix-rate 30 --start",
    "jobs list": "jobring jobs list --group my-app --status running",
    "jobs add": 'jobring jobs add --group my-app --desc "nightly report" --handler report '
                '--cron "0 0 2 * * ?" --timezone Europe/Berlin --timeout 600 --retries 2 --start',
    "jobs edit": 'jobring jobs edit 12 --cron "0 30 2 * * ?" --retry-interval 60 --retry-backoff exponential '
                 "--alarm-target webhook:https://hooks.example.com/jobs --deadline 30 --calendar cn-2026",
    "jobs glue": "jobring jobs glue 12 --set cleanup.sh --remark \"keep 7 days\"",
    "jobs show": "jobring jobs show 12",
    "jobs copy": "jobring jobs copy 12",
    "jobs delete": "jobring jobs delete 12",
    "jobs start": "jobring jobs start 12",
    "jobs stop": 'jobring jobs stop 12 --reason "upstream data late, INC-42"',
    "jobs trigger": "jobring jobs trigger 12 --param full --address http://10.0.0.7:9999/",
    "jobs next": "jobring jobs next 12 --count 3",
    "runs": "jobring runs list --job 12 --status fail",
    "runs list": "jobring runs list --group my-app --status fail --limit 5",
    "runs show": "jobring runs show 3051",
    "runs log": "jobring runs log 3051 --follow",
    "runs kill": "jobring runs kill 3051",
    "runs cancel": "jobring runs cancel 3052",
    "runs subtasks": "jobring runs subtasks 3051 --status failed",
    "runs retry-failed": "jobring runs retry-failed 3051",
    "runs clear": "jobring runs clear --rule older_than_1_month --group my-app",
    "workflows": "jobring workflows create --file nightly.json",
    "workflows list": "jobring workflows list",
    "workflows show": "jobring workflows show 3",
    "workflows create": "jobring workflows create --file nightly.json",
    "workflows validate": "jobring workflows validate --file nightly.json",
    "workflows update": "jobring workflows update 3 --file nightly.json",
    "workflows delete": "jobring workflows delete 3",
    "workflows trigger": "jobring workflows trigger 3 --params '{\"day\": \"20261201\"}'",
    "workflows schedule": "jobring workflows schedule 3 --cron \"0 0 2 * * ?\" --tz Asia/Shanghai --start",
    "workflows runs": "jobring workflows runs --workflow 3 --state failed",
    "workflows run-show": "jobring workflows run-show 41",
    "workflows retry": "jobring workflows retry 41",
    "workflows stop": "jobring workflows stop 41",
    "workflows mark-succeeded": "jobring workflows mark-succeeded 41 extract",
    "workflows rerun": "jobring workflows rerun 41 report",
    "calendars": "jobring calendars import cn-2026 --zone Asia/Shanghai --ics holidays.ics",
    "calendars list": "jobring calendars list --group my-app",
    "calendars show": "jobring calendars show cn-2026",
    "calendars add": "jobring calendars add ops --group my-app --zone Europe/Berlin --date 2026-12-24 "
                     "--window 22:00-06:00 --workdays MON,TUE,WED,THU,FRI",
    "calendars edit": "jobring calendars edit ops --zone Europe/Berlin --date 2026-12-24 --date 2026-12-31",
    "calendars import": "jobring calendars import cn-2026 --zone Asia/Shanghai --ics holidays.ics "
                        "--until 2027-12-31",
    "calendars delete": "jobring calendars delete ops",
    "groups": "jobring groups add my-app \"My app\"",
    "groups list": "jobring groups list --search billing",
    "groups show": "jobring groups show my-app",
    "groups add": 'jobring groups add billing "Billing and invoicing"',
    "groups edit": 'jobring groups edit billing --title "Billing" --address http://10.0.0.7:9999/',
    "groups delete": "jobring groups delete billing",
    "groups token": "export JOBRING_EXECUTOR_ACCESS_TOKEN=$(jobring groups token my-app)",
    "groups disable": "jobring groups disable my-app http://10.0.0.7:9999/",
    "groups flow": "jobring groups flow my-app --max-concurrent 30 --concurrency-key '{{params.tenant}}' "
                   "--key-limit 2",
    "groups enable": "jobring groups enable my-app http://10.0.0.7:9999/",
    "jobs delayed": "jobring jobs delayed 12 --cancel 3",
    "jobs backfill": "jobring jobs backfill 12 --start 2026-03-01T00:00:00Z --end 2026-03-30T23:59:59Z "
                     "--parallelism 3 --dry-run",
    "jobs backfills": "jobring jobs backfills 12 --cancel 4",
    "users": "jobring users add alice --role operator --group my-app",
    "users list": "jobring users list --role operator",
    "users add": "JOBRING_USER_PASSWORD=... jobring users add alice --role operator --group my-app",
    "users edit": "jobring users edit alice --role viewer --no-glue",
    "users reset-password": "jobring users reset-password alice\n"
                            "  jobring users reset-password admin --offline --database-url mysql://xxl:pw@db/xxl_job",
    "users delete": "jobring users delete alice",
    "tokens": "export JOBRING_TOKEN=$(jobring tokens create laptop --user admin)",
    "tokens create": "export JOBRING_TOKEN=$(jobring tokens create laptop --user admin)",
    "tokens list": "jobring tokens list",
    "tokens revoke": "jobring tokens revoke 3",
    "password": "jobring password --user admin",
    "settings": "jobring settings",
    "settings show": "jobring settings show --json",
    # Not `export X=$(...)`: export would succeed with an empty value when the command fails.
    "settings token": "T=$(jobring settings token) && export JOBRING_EXECUTOR_ACCESS_TOKEN=\"$T\"",
    "dashboard": "jobring dashboard --days 14",
    "audit": "jobring audit list --action auth.login_failed --since 24h",
    "audit list": "jobring audit list --target job:12 --json",
}


def walk(parser: argparse.ArgumentParser, path: str = "") -> list[tuple[str, argparse.ArgumentParser]]:
    """Every (command path, parser) of the tree, the top-level one as ``""``."""
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found += walk(child, f"{path} {name}".strip())
    return found


def add_examples(parser: argparse.ArgumentParser) -> None:
    """Put each command's example (when it has one) at the end of its help."""
    for path, command in walk(parser):
        example = EXAMPLES.get(path)
        if example is not None:
            command.epilog = f"example:\n  {example}"
            command.formatter_class = argparse.RawDescriptionHelpFormatter
