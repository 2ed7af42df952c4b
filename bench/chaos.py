"""Chaos scenarios at the issue's durations, by hand: a results table per scenario and backend.

    .venv/bin/python bench/chaos.py                       # every scenario, PostgreSQL and MariaDB
    .venv/bin/python bench/chaos.py node_sigkill clock_skew --backend postgresql
    .venv/bin/python bench/chaos.py --short               # the durations of tests/chaos

The scenarios are those of tests/chaos (tests/chaos/scenarios.py): 50 FIX_RATE 1 s jobs on
two admin nodes against a recording executor (ground truth: every /run received, with its
arrival time), then a fault: a node SIGKILLed, a node SIGSTOPped 15 s, every database
session killed plus connections refused 2 s, the database unreachable 20 s (a loopback
proxy closed), an executor SIGKILLed with running runs, the only admin down 2 min while
the executor finishes runs, two nodes whose clocks differ by 500 ms. One scenario runs at
a time, both backends together unless --backend is given.

Columns: planned (grid instants in the run), fired (received once or more), lost (not
received, not explained by the job's misfire or late-fire rule nor settled as sent),
doubled, settled (recorded by the killed or paused node under its send fence, never
received: the survivor counts them as sent, docs/design/takeover.md), coalesced (missed
instants a late fire of the job stands for), excused (skipped as a rule says, coalesced
included), max_late_ms (last /run arrival minus its planned instant; for the
executor scenarios: time to the retry / to the spooled results' delivery), takeover_ms
(first fire of the failed node's jobs by the survivor after the fault; the outage length
for the database outage). Numbers are from a shared box: noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.chaos: the harness and the scenarios

from tests.chaos.harness import SERVER_BACKENDS, Verdict  # noqa: E402
from tests.chaos.scenarios import LONG, SCENARIOS, SHORT, run_scenario  # noqa: E402

COLUMNS = ("planned", "fired", "lost", "doubled", "settled", "coalesced", "excused", "max_late_ms",
           "takeover_ms")


async def _one(name: str, backend: str, workdir: Path, short: bool) -> Verdict | BaseException:
    try:
        return await run_scenario(name, backend, workdir, SHORT if short else LONG)
    except Exception as exc:  # reported in the table, the other scenarios still run
        traceback.print_exc()
        return exc


def _print_table(results: list[tuple[str, str, Verdict | BaseException]]) -> None:
    head = f"{'scenario':<18} {'backend':<11} " + " ".join(f"{c:>12}" for c in COLUMNS) + "  verdict"
    print(head)
    print("-" * len(head))
    for name, backend, result in results:
        if isinstance(result, BaseException):
            print(f"{name:<18} {backend:<11} error: {type(result).__name__}: {str(result)[:150]}")
            continue
        row = result.row()
        cells = " ".join(f"{'-' if row[c] is None else row[c]:>12}" for c in COLUMNS)
        print(f"{name:<18} {backend:<11} {cells}  {'ok' if result.passed else 'FAIL'}")
        for note in result.info + result.notes:
            print(f"{'':<31}note: {note}")
        if result.lost:
            print(f"{'':<31}lost: {result.lost_span()}")
        if result.settled:
            print(f"{'':<31}settled as sent: {result.settled_span()}")
        if result.late:
            print(f"{'':<31}late over the bound (job, planned, ms): {result.late[:5]}")
        for pattern in result.patterns:
            print(f"{'':<31}{pattern[:400]}")
        for node_log in result.node_logs:
            print(node_log)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="*", choices=[[], *SCENARIOS], help="default: all")
    parser.add_argument("--backend", choices=SERVER_BACKENDS, action="append")
    parser.add_argument("--short", action="store_true", help="the short durations of tests/chaos")
    args = parser.parse_args(argv)
    names = args.scenarios or list(SCENARIOS)
    backends = args.backend or list(SERVER_BACKENDS)
    results: list[tuple[str, str, Verdict | BaseException]] = []
    with tempfile.TemporaryDirectory(prefix="jobring-chaos-") as tmp:
        for name in names:
            verdicts = await asyncio.gather(*(_one(name, b, Path(tmp), args.short) for b in backends))
            results += [(name, b, v) for b, v in zip(backends, verdicts, strict=True)]
            _print_table(results[-len(backends):])
    print()
    _print_table(results)
    return 0 if all(not isinstance(v, BaseException) and v.passed for _, _, v in results) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
