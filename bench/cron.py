"""Cron engine throughput: next-fire computations per second for a mix of expressions.

Run: .venv/bin/python bench/cron.py [--calls N] [--repeats R]

Each row calls ``CronExpression.next_after_ms`` on N start instants spread at random (fixed seed)
over 2020-2030 and reports the best of R runs (the machine is shared, so the best run is the least
disturbed one) both per wall-clock second and per CPU second of this process (less sensitive to
other load), plus the cost of parsing the expression.
"""

from __future__ import annotations

import argparse
import platform
import random
import time
from datetime import UTC, datetime

from jobring.core.cron import CronExpression

CASES: list[tuple[str, str, str]] = [
    ("simple", "0 0 12 * * ?", "UTC"),
    ("simple", "* * * * * ?", "UTC"),
    ("simple", "0 15 10 ? * MON-FRI", "UTC"),
    ("stepped", "0 0/5 14,18 * * ?", "UTC"),
    ("stepped", "10-40/15 */3 8-18 * * ?", "UTC"),
    ("L/W/#", "0 15 10 L-2 * ?", "UTC"),
    ("L/W/#", "0 0 9 LW * ?", "UTC"),
    ("L/W/#", "0 15 10 ? * 6L", "UTC"),
    ("L/W/#", "0 15 10 ? * 6#3", "UTC"),
    ("yearly", "0 11 11 11 11 ?", "UTC"),
    ("yearly", "0 0 0 29 2 ?", "UTC"),
    ("DST zone", "0 30 2 * * ?", "America/New_York"),
    ("DST zone", "0 */15 * * * ?", "Europe/Berlin"),
    ("DST zone", "0 15 10 ? * MON-FRI", "Europe/Berlin"),
]


def start_instants(count: int) -> list[int]:
    rng = random.Random(20_261_122)
    low = int(datetime(2020, 1, 1, tzinfo=UTC).timestamp() * 1000)
    high = int(datetime(2030, 1, 1, tzinfo=UTC).timestamp() * 1000)
    return [rng.randrange(low, high) for _ in range(count)]


def next_fire_rates(expression: CronExpression, starts: list[int], repeats: int) -> tuple[float, float]:
    """(calls per wall-clock second, calls per CPU second of this process), best runs."""
    best_wall = best_cpu = float("inf")
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        for start in starts:
            expression.next_after_ms(start)
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return len(starts) / best_wall, len(starts) / best_cpu


def parse_rate(text: str, zone: str, repeats: int) -> float:
    rounds = 200
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        for _ in range(rounds):
            CronExpression(text, zone)
        best = min(best, time.perf_counter() - began)
    return rounds / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000, help="start instants per expression")
    parser.add_argument("--repeats", type=int, default=3, help="runs per expression; the best counts")
    args = parser.parse_args()
    starts = start_instants(args.calls)
    machine = f"python {platform.python_version()} on {platform.machine()}"
    print(f"{machine}, {args.calls} calls x {args.repeats} runs")
    header = (
        f"| {'kind':<9} | {'expression':<25} | {'zone':<16} | {'next-fire/s':>11} "
        f"| {'per CPU-s':>10} | {'parse/s':>8} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(cell)) for cell in header.split("|")[1:-1]) + "|")
    rates: list[float] = []
    for kind, text, zone in CASES:
        expression = CronExpression(text, zone)
        rate, cpu_rate = next_fire_rates(expression, starts, args.repeats)
        rates.append(rate)
        parses = parse_rate(text, zone, args.repeats)
        cells = f"| {kind:<9} | {text:<25} | {zone:<16} | {rate:>11,.0f} | {cpu_rate:>10,.0f} "
        print(f"{cells}| {parses:>8,.0f} |")
    print(f"slowest row: {min(rates):,.0f} next-fire/s; fastest: {max(rates):,.0f}/s (wall clock)")


if __name__ == "__main__":
    main()
