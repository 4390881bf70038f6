"""Wall time of ``simulate`` (instance + plan → simulated step) at 100k+ GPUs.

The simulator runs one representative per equivalent pipeline group (weighted by its replica count),
so its cost grows with pp·v·m, not with the GPU count. Plans on the 102,400-GPU five-building instance:
the default placement (DP across) and PP across, with 1F1B, GPipe, ZB-V and DualPipe, and ZeRO-3 with DP
across — the worst case of the shared-resource timeline: every forward and backward of every stage gathers
its weights over the shared links, so every op starts and ends a flow that changes everybody's speed.
Each plan is simulated three times (the first call builds the cached op graph); the slowest call
counts. Usage: ``python benchmarks/simulate_scale.py``; the last line is the headline (target ≤ 2 s).
"""

from __future__ import annotations

import time
from pathlib import Path

from scaleacross_opt.io import load_instance
from scaleacross_opt.plan_defaults import fill_defaults
from scaleacross_opt.simulator import simulate
from scaleacross_opt.spec import BuildingShare, CrossBuilding, Placement, Plan
from scaleacross_opt.validation.plan_checks import check_plan

ROOT = Path(__file__).resolve().parent.parent
INSTANCE = ROOT / "instances" / "five-buildings-llama4-fabric-llama3-405b.yaml"


def plans(layers: int, buildings: list[str]) -> list[tuple[str, Plan]]:
    """Plans of every cross-building dimension on 5 × 20,480 GPUs."""
    out = []
    for schedule, v, pp, dp, cp, zero in (
        ("1f1b", 1, 20, 640, 1, 1), ("zb-v", 2, 10, 160, 8, 1), ("dualpipe", 2, 10, 160, 8, 1),
        ("1f1b", 1, 10, 1280, 1, 1), ("gpipe", 1, 20, 640, 1, 1), ("1f1b", 1, 20, 640, 1, 3),
    ):
        base = Plan(tp=8, cp=cp, pp=pp, dp=dp, micro_batch_size=1, schedule=schedule, virtual_stages=v,
                    zero_stage=zero)
        out.append((f"{schedule} v{v} pp{pp} dp{dp} cp{cp} ZeRO-{zero}, default placement", base))
        if pp % len(buildings) == 0:
            per = pp // len(buildings)
            split = [layers // pp + (1 if s < layers % pp else 0) for s in range(pp)]
            shares = [BuildingShare(building=b, dp_replicas=dp, pp_stages=per) for b in buildings]
            placement = Placement(cross_building=CrossBuilding.PP, buildings=shares, layers_per_stage=split)
            out.append((f"{schedule} v{v} pp{pp} dp{dp} cp{cp} ZeRO-{zero}, PP across",
                        base.model_copy(update={"placement": placement})))
    return out


def main() -> None:
    """Time every plan; print rows and, last, the slowest simulate() call."""
    instance = load_instance(INSTANCE)
    names = [b.name for b in instance.cluster.buildings]
    worst = 0.0
    for label, plan in plans(instance.job.model_spec.layers, names):
        try:
            plan = fill_defaults(instance, plan)
        except ValueError as err:
            print(f"{label}: skipped ({err})")
            continue
        if check_plan(plan, instance):
            print(f"{label}: skipped (invalid: {check_plan(plan, instance)[0][1]})")
            continue
        times = []
        for _ in range(3):
            start = time.perf_counter()
            report = simulate(instance, plan)
            times.append(time.perf_counter() - start)
        worst = max(worst, max(times))
        ops = report.details["simulated_ops"]
        print(f"{label}: step {report.step_time_s:.3f} s, simulate() {max(times):.3f} s ({ops} ops)")
    print(f"slowest simulate() at {instance.num_gpus:,} GPUs: {worst:.2f} s (target ≤ 2 s)")


if __name__ == "__main__":
    main()
