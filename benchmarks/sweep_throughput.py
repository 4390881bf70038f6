"""Sweep throughput: a 100-point sweep of the small instance on 1 and on 2 local worker processes.

10 link bandwidths (600 Gb/s .. 9.4 Tb/s) × 10 link latencies (10 µs .. 5.1 ms), each point solved with a
10 s time limit (most points converge in about a second). Each run starts from an empty results file.
Usage: ``python benchmarks/sweep_throughput.py [--workers 1,2]``; the last line is the headline: the speedup
of the last worker count over the first (goal ≥ 1.8× for 2 workers over 1). Each point's solve runs as many
CP-SAT workers as the CPUs its worker process holds (all of them with 1 worker, half each with 2). Each run
also prints how many cores its workers kept busy on average (other jobs on the machine lower it).
"""

from __future__ import annotations

import argparse
import math
import resource
import tempfile
import time
from collections import Counter
from pathlib import Path

from scaleacross_opt import load_instance, sweep

ROOT = Path(__file__).resolve().parent.parent
INSTANCE = ROOT / "instances" / "small-two-buildings-llama3-8b.yaml"
VARY = {
    "cluster.links[*].bandwidth_gbps": [round(600 * 1.36**k) for k in range(10)],
    "cluster.links[*].latency_us": [10 * 2**k for k in range(10)],
}
TIME_LIMIT_S = 10.0


def run(workers: int) -> float:
    """Wall seconds of the whole sweep on ``workers`` processes; prints what the points' solves reported."""
    instance = load_instance(INSTANCE)
    with tempfile.TemporaryDirectory() as folder:
        cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        records = sweep(instance, VARY, out=Path(folder) / "results.jsonl", workers=workers,
                        time_limit_s=TIME_LIMIT_S)
        wall = time.perf_counter() - start
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the pool's processes, reaped when it closed
    cpu_s = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    statuses = Counter(r.results[0].status if r.results else r.status for r in records)
    solve_s = sum(r.results[0].wall_s or 0.0 for r in records if r.results)
    print(f"{workers} worker{'s' * (workers != 1)}: {len(records)} points in {wall:.1f} s "
          f"({len(records) / wall * 60:.0f} points/min; solves' own wall {solve_s:.1f} s in total; worker CPU "
          f"{cpu_s:.0f} s = {cpu_s / wall:.2f} cores busy on average; statuses {dict(statuses)})", flush=True)
    return wall


def main() -> None:
    """Run the sweep once per worker count; print the speedup last."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts (default 1,2)")
    counts = [int(n) for n in parser.parse_args().workers.split(",")]
    walls = [run(n) for n in counts]
    points = math.prod(len(values) for values in VARY.values())
    print(f"speedup of {counts[-1]} workers over {counts[0]}: {walls[0] / walls[-1]:.2f}× "
          f"({walls[0]:.1f} s → {walls[-1]:.1f} s for {points} points; goal ≥ 1.8× for 2 over 1)")


if __name__ == "__main__":
    main()
