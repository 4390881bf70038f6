"""Optimality of the planner: exhaustive enumeration through the simulator vs ``solve``.

For every case (the shipped instances whose search space is small enough, plus shipped instances
with a ``search`` restriction added here to make them enumerable), enumerate every plan of the
design space (after dominance pruning of network settings, which cannot change the optimum: a
dominated setting is no better on any path in the cost model the simulator runs on), keep those
the independent validator accepts, simulate each, and compare the best with what ``solve`` returns.

Prints one row per case, then last: the worst relative gap (solve − exhaustive) / exhaustive.
Usage: python benchmarks/optimality.py [--time-limit S] [--workers N] [--only NAME]
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from scaleacross_opt import load_instance
from scaleacross_opt.optimizer import solve
from scaleacross_opt.optimizer.coefficients import prune_space
from scaleacross_opt.optimizer.enumerate import enumerate_plans
from scaleacross_opt.optimizer.space import design_space
from scaleacross_opt.simulator import simulate
from scaleacross_opt.spec import Instance, Plan, SearchSpace
from scaleacross_opt.validation.plan_checks import validate_plan

ROOT = Path(__file__).resolve().parent.parent
MAX_PLANS = 200_000

# Shipped instances with the search restricted so that brute force stays affordable.
RESTRICTED: dict[str, SearchSpace] = {
    "single-building-llama3-70b": SearchSpace(
        tp_degrees=[4, 8], cp_degrees=[1, 2], pp_degrees=[2, 4, 8], micro_batch_sizes=[1],
        virtual_stages=[1, 2], schedules=["1f1b", "interleaved-1f1b", "zb-h1"], recompute=["none", "selective"],
        zero_stages=[1], collective_algorithms=["ring"], load_balancing=["ecmp"], congestion_control=["dcqcn"],
        loss_recovery=["go_back_n"], qps_per_connection=[1], window_kib_per_qp=[4096]),
    "cross-region-gpt3-175b": SearchSpace(
        tp_degrees=[8], cp_degrees=[1], pp_degrees=[8, 16], micro_batch_sizes=[1], virtual_stages=[1, 2],
        schedules=["1f1b", "interleaved-1f1b", "crosspipe-unidirectional"], recompute=["full"], zero_stages=[1],
        collective_algorithms=["ring", "pat"], load_balancing=["ecmp"], congestion_control=["dcqcn", "receiver_driven"],
        loss_recovery=["go_back_n", "selective_repeat"], qps_per_connection=[1, 16], window_kib_per_qp=[4096, 65536]),
    # three buildings: dp across or pipeline groups (pp+dp); pp alone cannot hold all replicas' stages
    "three-buildings-campus-llama3-70b": SearchSpace(
        tp_degrees=[8], cp_degrees=[1], pp_degrees=[4, 8, 16], micro_batch_sizes=[1], virtual_stages=[1, 2],
        schedules=["1f1b", "interleaved-1f1b", "zb-h1"], recompute=["selective"], zero_stages=[1],
        collective_algorithms=["ring"], load_balancing=["packet_spraying"], congestion_control=["receiver_driven"],
        loss_recovery=["selective_repeat"], qps_per_connection=[4], window_kib_per_qp=[16384]),
    "hetero-h100-b200-llama3-405b": SearchSpace(
        tp_degrees=[8], cp_degrees=[1], pp_degrees=[5, 10, 20], micro_batch_sizes=[1], virtual_stages=[1],
        schedules=["1f1b", "zb-h1"], recompute=["selective", "full"], zero_stages=[1],
        collective_algorithms=["ring"], load_balancing=["packet_spraying"], congestion_control=["receiver_driven"],
        loss_recovery=["selective_repeat"], qps_per_connection=[4], window_kib_per_qp=[16384]),
}


def _simulate_one(args: tuple[Instance, Plan]) -> tuple[float, str] | None:
    instance, plan = args
    if validate_plan(plan, instance):
        return None
    return simulate(instance, plan).step_time_s, plan.model_dump_json()


def exhaustive(instance: Instance, workers: int) -> tuple[int, int, float, str, float]:
    """(plans enumerated, plans valid, best simulated step, best plan JSON, wall s)."""
    start = time.perf_counter()
    plans = list(enumerate_plans(instance, prune_space(instance, design_space(instance))))
    if len(plans) > MAX_PLANS:
        raise SystemExit(f"{instance.name}: {len(plans)} plans exceed the brute-force budget of {MAX_PLANS}")
    with ProcessPoolExecutor(max_workers=workers) as pool:
        results = [r for r in pool.map(_simulate_one, [(instance, p) for p in plans], chunksize=64) if r]
    if not results:
        raise SystemExit(f"{instance.name}: no valid plan in the restricted space; widen its restriction")
    best_time, best_plan = min(results)
    return len(plans), len(results), best_time, best_plan, time.perf_counter() - start


def cases(only: str | None) -> list[Instance]:
    out = []
    for path in sorted((ROOT / "instances").glob("*.yaml")):
        instance = load_instance(path)
        if only and instance.name != only:
            continue
        if instance.name.startswith("small-"):  # two bucket sizes of four: 114k plans instead of 228k
            out.append(instance.with_updates({"search.dp_bucket_factors": [1, 64]}))
        elif instance.name in RESTRICTED:
            out.append(instance.model_copy(update={"search": RESTRICTED[instance.name]}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=60.0, help="solve's time limit per case, s")
    parser.add_argument("--workers", type=int, default=2, help="processes for brute force")
    parser.add_argument("--only", help="run one case by instance name")
    args = parser.parse_args()
    header = (f"{'instance':<34} {'plans':>7} {'valid':>7} {'brute s':>8} {'brute step':>11} "
              f"{'solve s':>8} {'sims':>5} {'status':<18} {'solve step':>11} {'gap %':>7}")
    print(header)
    worst = 0.0
    for instance in cases(args.only):
        n_plans, n_valid, best, best_plan, brute_s = exhaustive(instance, args.workers)
        result = solve(instance, time_limit_s=args.time_limit, seed=0)
        gap = (result.step_time_s - best) / best
        worst = max(worst, gap)
        print(f"{instance.name:<34} {n_plans:>7} {n_valid:>7} {brute_s:>8.1f} {best:>11.5f} "
              f"{result.stats.wall_s:>8.1f} {result.stats.candidates_simulated:>5} {result.stats.status:<18} "
              f"{result.step_time_s:>11.5f} {gap * 100:>7.3f}", flush=True)
        if gap > 1e-3:
            print(f"  exhaustive best: {best_plan}", file=sys.stderr)
            print(f"  solve returned:  {result.plan.model_dump_json()}", file=sys.stderr)
    print(f"worst relative gap (solve vs exhaustive): {worst * 100:.3f} %")


if __name__ == "__main__":
    main()
