"""Flow-control options of `jobs add` / `jobs edit` and `groups flow` (docs/dispatch.md,
"Flow control"): limits, concurrency key, policy, rate limit, priority."""

from __future__ import annotations

import argparse
from typing import Any

from jobring.cli.remote import positive_int

ON_LIMIT = ("queue", "skip", "cancel_oldest")
_PERIODS = ("second", "minute", "hour")


def _count(text: str) -> int:
    return 0 if text.strip() == "0" else positive_int(text)


def rate(text: str) -> tuple[int, str]:
    """argparse type of --rate-limit: ``N/second`` (or ``/minute``, ``/hour``; ``N`` alone is
    per second); a count of 0 removes the rate limit."""
    count, _, period = text.strip().partition("/")
    period = period.strip() or "second"
    if period not in _PERIODS:
        raise argparse.ArgumentTypeError(f"expected N/second, N/minute or N/hour, got {text!r}")
    return _count(count), period


def priority(text: str) -> int:
    if text.strip() not in ("1", "2", "3"):
        raise argparse.ArgumentTypeError(f"expected 1 (low), 2 (normal) or 3 (high), got {text!r}")
    return int(text)


def add_flow_options(parser: argparse.ArgumentParser, *, editing: bool, what: str = "the job") -> None:
    """The flow-control options; on edit a 0 or '' removes that setting."""
    removes = " (0 removes it)" if editing else ""
    parser.add_argument("--max-concurrent", type=_count, metavar="N",
                        help=f"at most N runs of {what} at a time, across every admin node" + removes)
    parser.add_argument("--concurrency-key", metavar="TEMPLATE",
                        help="a key rendered per run, e.g. '{{params.tenant}}': --key-limit and --rate-limit "
                             "count per key value" + (" ('' removes it)" if editing else ""))
    parser.add_argument("--key-limit", type=_count, metavar="N",
                        help="at most N runs per key value" + removes)
    parser.add_argument("--on-limit", choices=ON_LIMIT,
                        help="when a limit is reached: queue (wait; default), skip the run, or cancel_oldest")
    parser.add_argument("--rate-limit", type=rate, metavar="N/PERIOD",
                        help="at most N starts per second, minute or hour (per key when a key is set)"
                             + removes)
    parser.add_argument("--priority", type=priority, metavar="1-3",
                        help="order of queued runs: 1 low, 2 normal (default), 3 high")
    if editing:
        parser.add_argument("--no-flow", action="store_true", help="remove every flow-control setting")


def flow_changes(args: argparse.Namespace) -> dict[str, Any] | None:
    """The settings the options change (a value None removes it); None: no option given;
    ``{}`` for --no-flow (remove them all)."""
    if getattr(args, "no_flow", False):
        return {}
    changes: dict[str, Any] = {}
    if args.max_concurrent is not None:
        changes["max_concurrent_runs"] = args.max_concurrent or None
    if args.concurrency_key is not None:
        changes["concurrency_key"] = args.concurrency_key if args.concurrency_key.strip() else None
    if args.key_limit is not None:
        changes["key_limit"] = args.key_limit or None
    if args.on_limit is not None:
        changes["on_limit"] = args.on_limit
    if args.rate_limit is not None:
        count, period = args.rate_limit
        changes["rate_limit"], changes["rate_period"] = (count, period) if count else (None, None)
    if args.priority is not None:
        changes["priority"] = args.priority
    return changes or None


def merged_flow(current: dict[str, Any] | None, changes: dict[str, Any]) -> dict[str, Any] | None:
    """Settings with the changes applied (None: none left); ``changes`` ``{}`` removes all."""
    if not changes:
        return None
    merged = {k: v for k, v in (current or {}).items() if v is not None}
    merged.update(changes)
    kept = {k: v for k, v in merged.items() if v is not None}
    if "rate_limit" not in kept:
        kept.pop("rate_period", None)
    if "concurrency_key" not in kept:
        kept.pop("key_limit", None)
    if set(kept) <= {"on_limit", "rate_period"}:
        return None
    return kept
