"""An executor's port flooded (issue #19 item 7(c)): what the admin's calls cost meanwhile and
how much memory the executor takes.

    .venv/bin/python bench/executor_flood.py [--idle 1100] [--posts 40] [--body-mib 8] [--calls 10]

A real admin process (SQLite) and the demo executor process, as the end-to-end tests start
them. First ``--calls`` admin calls on a quiet executor: a manual trigger through the admin
until its result is back (``/run`` + callback) and a fresh-connection ``/beat`` with the
token. Then the same calls while ``--idle`` idle connections are held from 127.0.0.1-9
(re-opened as the executor closes them) and ``--posts`` token-less ``POST /run`` with
``--body-mib`` MiB bodies are sent at once. Prints the executor's RSS (before, peak), the
connections opened and closed, and the call latencies.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e.edge_kit import Stack, executor_call, run_hello, running_stack  # noqa: E402
from tests.e2e.flood_kit import IdleFlood, RssSampler, tokenless_runs, wait_for  # noqa: E402


def timed(call: Callable[[], object], times: int) -> list[float]:
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        call()
        spent.append((time.perf_counter() - started) * 1000)
    return spent


def trigger(stack: Stack) -> None:
    run = run_hello(stack)
    assert run["handle_code"] == 200, run


def beat(stack: Stack) -> None:
    assert executor_call(stack, "/beat", {}) == {"code": 200}


def summary(name: str, spent: list[float]) -> str:
    return (f"{name}: median {statistics.median(spent):.0f} ms, max {max(spent):.0f} ms "
            f"({len(spent)} calls)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--idle", type=int, default=1_100)
    parser.add_argument("--posts", type=int, default=40)
    parser.add_argument("--body-mib", type=int, default=8)
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args()
    cpu = platform.processor() or platform.machine()
    print(f"machine: {platform.node()}, {cpu}, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as work, running_stack(Path(work)) as stack:
        quiet_trigger = timed(lambda: trigger(stack), args.calls)
        quiet_beat = timed(lambda: beat(stack), args.calls)
        with RssSampler(stack.executor.pid) as rss, IdleFlood(stack.executor_port, args.idle) as flood, \
                ThreadPoolExecutor(1) as background:
            wait_for(flood.held_at_full, f"{args.idle} idle connections")
            posts = background.submit(tokenless_runs, stack.executor_port, args.posts, args.body_mib << 20)
            flooded_trigger = timed(lambda: trigger(stack), args.calls)
            flooded_beat = timed(lambda: beat(stack), args.calls)
            started = time.perf_counter()
            answers = posts.result(timeout=600)
            posts_s = time.perf_counter() - started
        refused = sum(1 for a in answers if a == (200, {"code": 500, "msg": "The access token is wrong."}))
        print(f"executor RSS: {rss.before / (1 << 20):.0f} MB before, peak {rss.peak / (1 << 20):.0f} MB "
              f"(+{rss.growth_mb:.0f} MB)")
        print(f"idle connections: {flood.opened} opened, {flood.closed_by_server} closed by the executor, "
              f"{flood.connect_failures} connects failed")
        print(f"token-less POST /run ({args.body_mib} MiB): {refused}/{args.posts} answered 'The access "
              f"token is wrong.' (all done {posts_s:.1f} s after the admin calls)")
        print(summary("admin trigger -> result, quiet", quiet_trigger))
        print(summary("admin trigger -> result, flooded", flooded_trigger))
        print(summary("/beat on a new connection, quiet", quiet_beat))
        print(summary("/beat on a new connection, flooded", flooded_beat))


if __name__ == "__main__":
    main()
