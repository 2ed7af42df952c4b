"""Run-log writing in-process: the process's CPU per run for N runs of 3 lines each (the
engine's start and end lines and one handler line), written by the RunLog's writer thread, and
a ``/log`` read of an old run (the index search when the run is no longer remembered).

No HTTP, no engine: only ``RunLog.writer`` / ``write_line`` / ``close`` on this thread and the
writer thread's batches. Compare two trees with ``PYTHONPATH``:

    PYTHONPATH=<src> .venv/bin/python bench/runlog_write.py --runs 30000 --root /tmp
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time

from jobring.executor.runlog import RunLog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=30_000)
    parser.add_argument("--root", default=tempfile.gettempdir(), help="folder for the run logs")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="bench-runlog-", dir=args.root)
    try:
        runlog = RunLog(folder)
        stamp = int(time.time() * 1000)
        cpu, wall = time.process_time(), time.perf_counter()
        for log_id in range(1, args.runs + 1):
            writer = runlog.writer(stamp, log_id)
            writer.write_line("start")
            writer.write_line("ok")
            writer.write_line("end")
            writer.close()
            if log_id % 5000 == 0:
                while runlog.behind(100):  # as the engine's backlog cap would
                    time.sleep(0.001)
        while runlog.behind(0):
            time.sleep(0.001)
        time.sleep(0.05)  # the writer thread's last batch
        runlog.flush()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        read_cpu = time.process_time()
        content = runlog.read(stamp, 1, 1).log_content  # the oldest run: not remembered any more
        read_cpu = time.process_time() - read_cpu
        assert content == "start\nok\nend\n", content
        print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')} {platform.python_version()} {os.cpu_count()} cores, "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, run logs in {args.root}")
        print(f"{args.runs} runs: {cpu / args.runs * 1e6:.1f} µs CPU per run (all threads), "
              f"{args.runs / wall:,.0f} runs/s; /log of the oldest run: {read_cpu * 1000:.1f} ms CPU")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
