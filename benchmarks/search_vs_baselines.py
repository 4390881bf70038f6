"""`solve` against the simple searches (`random`, `annealing`) at equal wall time.

For every shipped instance (and, with --with-1m, the 1M-GPU case of solve_scale.py), each budget and
seed: `solve` and each search baseline get the same wall seconds; all plans are scored by the same
simulator. Prints one row per run, wins / ties / losses of `solve` (tie: within 0.1 %), the proven gap of
`solve` at each budget, the spread of `solve` over seeds per instance and budget, and, last, the worst
relative loss of `solve` (goal: no loss at any budget). With --plans-dir, every method's plan is written
there as INSTANCE_BUDGET_SEED_METHOD.json (replayable with `simulate --plan`), so an answer met only once —
a lucky draw of a baseline, a loss of `solve` — can be examined afterwards.

    python benchmarks/search_vs_baselines.py [--budgets 10,30,120] [--seeds 0,1,2] [--with-1m] [--plans-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from scaleacross_opt import load_instance
from scaleacross_opt.baselines.registry import run_baseline
from scaleacross_opt.optimizer import solve
from scaleacross_opt.spec import Plan

ROOT = Path(__file__).resolve().parent.parent
SEARCHES = ("random", "annealing")
TIE = 1e-3


def instances(with_1m: bool) -> list[tuple[str, object]]:
    paths = sorted(p for p in (ROOT / "instances").glob("*.yaml") if "infeasible" not in p.name)
    out = [(p.stem, load_instance(p)) for p in paths]
    if with_1m:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from solve_scale import cases

        case = next(c for c in cases() if c.name.startswith("16b-1m"))
        out.append((case.name, case.build()))
    return out


def save_plans(directory: Path, run: str, plans: dict[str, Plan | None]) -> None:
    """Write each method's plan of one run as ``{run}_{method}.json`` (a method that found none: no file)."""
    for method, plan in plans.items():
        if plan is not None:
            (directory / f"{run}_{method}.json").write_text(plan.model_dump_json(indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="10,30,120", help="wall seconds per method, comma-separated")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--with-1m", action="store_true", help="add the 1,048,576-GPU case")
    parser.add_argument("--instances", help="comma-separated instance names (default: every shipped one)")
    parser.add_argument("--plans-dir", type=Path, help="write every method's plan here (JSON, one file per run)")
    args = parser.parse_args()
    if args.plans_dir:
        args.plans_dir.mkdir(parents=True, exist_ok=True)
    budgets = [float(b) for b in args.budgets.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    chosen = instances(args.with_1m)
    if args.instances:
        chosen = [(name, inst) for name, inst in chosen if name in args.instances.split(",")]
    tally = {"win": 0, "tie": 0, "loss": 0}
    worst_loss, worst_where = 0.0, "none"
    gaps: dict[float, list[tuple[str, float]]] = defaultdict(list)
    spread: dict[tuple[str, float], list[float]] = defaultdict(list)
    print(f"{'instance':42s} {'budget':>6s} {'seed':>4s} {'solve':>10s} {'random':>10s} {'annealing':>10s} "
          f"{'sims':>5s} {'twins':>5s} {'round':>6s} {'gap':>6s}  result   (sims: plans solve simulated, twins: of "
          "them, plans whose workload was simulated before, reused; round: mean CP-SAT s per round; gap: solve's "
          "proven gap, %)")
    for name, instance in chosen:
        for budget in budgets:
            for seed in seeds:
                result = solve(instance, time_limit_s=budget, seed=seed)
                ours = result.step_time_s
                plans = {"solve": result.plan}
                gaps[budget].append((name, result.stats.gap))
                spread[(name, budget)].append(ours)
                theirs = {}
                for method in SEARCHES:
                    found = run_baseline(method, instance, time_limit_s=budget, seed=seed)
                    theirs[method] = found.report.step_time_s if found.report is not None else float("inf")
                    plans[method] = found.plan
                if args.plans_dir:
                    save_plans(args.plans_dir, f"{name}_{budget:g}_{seed}", plans)
                best_other = min(theirs.values())
                loss = ours / best_other - 1
                outcome = "tie" if abs(loss) <= TIE else ("loss" if loss > 0 else "win")
                tally[outcome] += 1
                if loss > worst_loss:
                    worst_loss, worst_where = loss, f"{name} at {budget:g} s, seed {seed}"
                stats = result.stats
                round_s = stats.cpsat_wall_s / max(1, stats.rounds)
                print(f"{name:42s} {budget:6g} {seed:4d} {ours:10.4f} {theirs['random']:10.4f} "
                      f"{theirs['annealing']:10.4f} {stats.candidates_simulated:5d} {stats.simulations_reused:5d} "
                      f"{round_s:6.2f} {100 * stats.gap:6.1f}  {outcome} ({100 * loss:+.2f} %)", flush=True)
    print(f"solve vs the best of random/annealing: {tally['win']} wins, {tally['tie']} ties, {tally['loss']} losses")
    for budget, rows in gaps.items():
        print(f"proven gap of solve at {budget:g} s: worst {100 * max(g for _, g in rows):.1f} % "
              f"({max(rows, key=lambda r: r[1])[0]}), median {100 * sorted(g for _, g in rows)[len(rows) // 2]:.1f} %")
    if len(seeds) > 1:
        for (name, budget), values in spread.items():
            print(f"seed spread of solve, {name} at {budget:g} s: {100 * (max(values) / min(values) - 1):.2f} %")
    print(f"worst relative loss of solve: {100 * worst_loss:.2f} % ({worst_where}; goal: no loss)")


if __name__ == "__main__":
    main()
