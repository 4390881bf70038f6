"""Simulator speed: simulated compute ops per second on large pipelines.

Cases: interleaved 1F1B with pp=16, m=128, v=2 (8192 ops), and a 64-stage 1F1B with m=256
(32768 ops); each over a building boundary with latency and bandwidth, once without link
contention (list-scheduling path) and once with it (event loop). Each case runs ≈2 s after one
warm-up call (which builds the cached op graph). Usage: ``python benchmarks/simulator_speed.py``.
The last line is the headline number.
"""

from __future__ import annotations

import time

from scaleacross_opt.simulator import simulate_workload
from scaleacross_opt.simulator.synthetic import uniform_workload


def ops_per_second(label: str, seconds: float = 2.0, **kwargs: object) -> float:
    """Simulate the workload repeatedly for ``seconds``; print and return ops/s."""
    workload = uniform_workload(**kwargs)  # type: ignore[arg-type]
    result = simulate_workload(workload)
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        simulate_workload(workload)
        runs += 1
    rate = runs * result.num_ops / (time.perf_counter() - start)
    contention = "event loop" if any(g.contended for g in result.groups) else "list pass"
    print(f"{label} [{contention}]: {runs} runs, {rate:,.0f} ops/s")
    return rate


def main() -> None:
    """Run the cases; the headline (last line) is the pp=16, m=128, v=2 uncontended case."""
    ops = {"fwd_s": 2e-3, "bwd_input_s": 2e-3, "bwd_weight_s": 2e-3, "latency_s": 1e-3, "p2p_bytes": 64e6}
    link = {"cuts": (8,), **ops}
    ops_per_second("pp=64,m=256,1f1b", schedule="1f1b", pp=64, v=1, m=256, cuts=(32,),
                   bandwidth_bytes_per_s=100e9, **ops)
    ops_per_second("pp=16,m=128,v=2 contended", schedule="interleaved-1f1b", pp=16, v=2, m=128,
                   bandwidth_bytes_per_s=10e9, **link)
    headline = ops_per_second("pp=16,m=128,v=2", schedule="interleaved-1f1b", pp=16, v=2, m=128,
                              bandwidth_bytes_per_s=200e9, **link)
    print(f"simulated ops/s (pp=16,m=128,v=2): {headline:.0f}")


if __name__ == "__main__":
    main()
