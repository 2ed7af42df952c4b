"""What the commands that talk to a running admin share: connection options, the client,
error reporting and output (aligned tables or ``--json``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TextIO
from urllib.parse import urlsplit

import httpx

from jobring.cli.common import EXIT_USAGE, UsageError
from jobring.client import AdminApiError, AdminClient, AdminConnectionError, Page
from jobring.client.core import DEFAULT_URL

EXIT_FAILURE = 1
URL_ENV = "JOBRING_URL"
TOKEN_ENV = "JOBRING_TOKEN"

TransportFactory = Callable[[str], httpx.BaseTransport]

# The network seam: tests install an in-process transport here; None means real HTTP.
_transport_factory: ContextVar[TransportFactory | None] = ContextVar("jobring_cli_transport", default=None)


@contextmanager
def use_transport(factory: TransportFactory) -> Iterator[None]:
    """Within this block, CLI commands reach the admin through ``factory(url)``."""
    reset = _transport_factory.set(factory)
    try:
        yield
    finally:
        _transport_factory.reset(reset)


def group_parser(sub: Any, name: str, help_text: str) -> tuple[argparse.ArgumentParser, Any]:
    """A command group (``jobring NAME COMMAND``) that prints its own help when no command is given."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=help_text)

    def usage(args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return EXIT_USAGE

    parser.set_defaults(handler=usage)
    return parser, parser.add_subparsers(dest=f"{name}_command", metavar="COMMAND")


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url", default=None, help=f"the admin's address (default: ${URL_ENV} or {DEFAULT_URL})"
    )
    parser.add_argument("--token", default=None, help=f"API token (default: ${TOKEN_ENV})")


def add_json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def open_client(args: argparse.Namespace) -> AdminClient:
    """A client for ``--url``/``--token`` (or their env vars); no token for commands that log
    in with ``--user`` (``args.user``), so that the session, not some token, decides who acts."""
    url = args.url or os.environ.get(URL_ENV) or DEFAULT_URL
    parsed = urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise UsageError(f"--url must be an http:// or https:// address, got {url!r}")
    logging_in = bool(getattr(args, "user", None))
    token = None if logging_in else (args.token or os.environ.get(TOKEN_ENV) or None)
    factory = _transport_factory.get()
    return AdminClient(url, token=token, transport=factory(url) if factory else None)


def run_remote(args: argparse.Namespace, action: Callable[[AdminClient], int]) -> int:
    """Run ``action`` with a client; report API and connection errors as the CLI does:
    exit 2 for a request the admin refused (4xx), 1 for an unreachable or failing admin."""
    try:
        with open_client(args) as client:
            return action(client)
    except AdminApiError as exc:
        message = exc.message
        if exc.field is not None and exc.field not in message:
            message = f"{exc.field}: {message}"
        logging_in = bool(getattr(args, "user", None))
        if exc.status == 401 and not logging_in and not (args.token or os.environ.get(TOKEN_ENV)):
            message += f" (give an API token with --token or ${TOKEN_ENV})"
        print(f"jobring: error: {message}", file=sys.stderr)
        return EXIT_USAGE if exc.is_client_error else EXIT_FAILURE
    except AdminConnectionError as exc:
        print(f"jobring: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE


def remote_parser(
    sub: Any, name: str, help_text: str, *, json_output: bool = True
) -> argparse.ArgumentParser:
    """A command that talks to the admin: ``--url``, ``--token`` and (usually) ``--json``."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=help_text)
    add_connection_args(parser)
    if json_output:
        add_json_arg(parser)
    return parser


def group_ref(text: str) -> str:
    """argparse type of a group argument: an id (all digits) or an appname."""
    value = text.strip()
    if not value:
        raise argparse.ArgumentTypeError("expected a group id or appname, got an empty string")
    if value.isdigit() and int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a group id >= 1, got {value}")
    return value


def resolve_group(admin: AdminClient, ref: str | None) -> int | None:
    """The id of the group ``ref`` names: digits are an id, anything else an appname
    (looked up exactly; UsageError when no group has it)."""
    if ref is None:
        return None
    if ref.isdigit():
        return int(ref)
    # The API's filter matches substrings: pick the exact appname among the matches.
    page = admin.groups.list(app_name=ref, limit=500)
    for group in page.items:
        if group.get("app_name") == ref:
            return int(group["id"])
    raise UsageError(f"no executor group has the appname {ref!r} (create it: jobring groups add {ref} TITLE)")


def positive_int(text: str) -> int:
    """argparse type for ids and counts: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def epoch_ms_text(value: Any) -> str | None:
    """Epoch milliseconds as ``YYYY-MM-DD HH:MM:SS`` (UTC); None for 0/absent."""
    if not isinstance(value, int) or value <= 0:
        return None
    return datetime.fromtimestamp(value / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def revoked_text(sessions: int, tokens: int) -> str:
    """What a change revoked, for people: "2 sessions ended and 1 API token revoked"."""
    return (f"{sessions} session{'' if sessions == 1 else 's'} ended and "
            f"{tokens} API token{'' if tokens == 1 else 's'} revoked")


def instant_text(value: Any) -> str | None:
    """An ISO 8601 instant from the API as ``YYYY-MM-DD HH:MM:SS`` (UTC)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC)
    return parsed.strftime("%Y-%m-%d %H:%M:%S")


def print_json(value: Any, out: TextIO | None = None) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False), file=out or sys.stdout)


def print_result(args: argparse.Namespace, value: Any, line: str) -> None:
    """A command's outcome: ``value`` as JSON under ``--json``, else the one-line summary."""
    if getattr(args, "json", False):
        print_json(value)
    else:
        print(line)


def print_page_json(page: Page) -> None:
    """A listing's ``--json`` output: the page as the API sent it."""
    print_json({"items": page.items, "total": page.total, "offset": page.offset, "limit": page.limit})


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    text = str(value).replace("\n", " ").replace("\t", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def print_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[tuple[str, str | Callable[[Mapping[str, Any]], Any]]],
    out: TextIO | None = None,
) -> None:
    """Rows as a left-aligned table; each column is (heading, key or function of the row)."""
    stream = out or sys.stdout
    cells = [
        [_cell(source(row) if callable(source) else row.get(source)) for _, source in columns] for row in rows
    ]
    headings = [heading for heading, _ in columns]
    widths = [max([len(h), *(len(line[i]) for line in cells)]) for i, h in enumerate(headings)]
    for line in [headings, *cells]:
        padded = (text.ljust(width) for text, width in zip(line, widths, strict=True))
        print("  ".join(padded).rstrip(), file=stream)
