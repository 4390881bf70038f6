"""Scale benchmark of the optimizer: solve wall time and plan quality from 1 building / 1k GPUs to 16 / 1M.

Run: ``python benchmarks/solve_scale.py [--quick] [--only NAME] [--seed N] [--top-k K] [--verbose]``.
Instances are built in memory (pydantic objects, checked like a loaded file); the search space is left
free, so every case searches all degrees, schedules, placements and network settings.

Cases (time limits: 30 s at 100k GPUs, 120 s at 1M, 20 s otherwise; ``--quick`` halves them):

- ``1b-1k-llama3-70b``: 1 × 1,024 H100, Llama 3 70B, 512 × 8,192 tokens (4M, 4,096 tokens per GPU).
- ``2b-16k-llama3-405b``: 2 × 8,192 H100 on one campus (150 µs, 1:2.8 → 8,192 × 400 ÷ 2.8 Gb/s on the
  single link), Llama 3 405B, 2,048 × 8,192 tokens (16M, the Llama 3 405B batch).
- ``4b-8k-deepseek-v3``: MoE; 4 × 2,048 H800, DeepSeek-V3 in FP8, 15,360 × 4,096 tokens (the DeepSeek-V3
  batch); full mesh, each building's 2,048 × 400 ÷ 2.8 Gb/s of cross-building capacity over 3 peers,
  150 µs.
- ``5b-100k-llama3-405b``: 5 × 20,480 = 102,400 H100, Llama-4-like fabric (full mesh of 10 links,
  20,480 × 400 ÷ 2.8 ÷ 4 Gb/s each, 200 µs), Llama 3 405B, 5,120 × 8,192 tokens (as the shipped
  ``five-buildings-llama4-fabric-llama3-405b``; 5,120 = 5 · 1,024 lets whole replicas spread evenly).
- ``16b-1m-dense-1t``: 16 × 65,536 = 1,048,576 H100, a ~1T dense model defined inline (Llama-3-style
  GQA/SwiGLU, 192 layers, h = 20,480), 65,536 × 8,192 tokens (537M, 512 tokens per GPU, the per-GPU
  share of the 102,400-GPU case halved). 1:2.8, 200 µs per hop.
  Topology: a **ring** of 16 links, not a full mesh of 120. Both cross-building traffic patterns the
  planner produces follow the building order: PP boundaries join consecutive buildings of the chain and
  the cross-building DP collective (flat or hierarchical) is a ring over the buildings in placement
  order. On a ring each of those hops is a direct link carrying half of a building's cross-building
  capacity (65,536 × 400 ÷ 2.8 ÷ 2 ≈ 4.68 Pb/s); a full mesh would split the same capacity over 15
  peers (≈ 0.62 Pb/s per link), 7.5× less per ring hop, with 13 of 15 links idle. 16 fibre bundles is
  also what a campus of 16 halls plausibly builds, where 120 point-to-point bundles is not.

Columns: wall = time of ``solve()`` end to end (design space + coefficients + CP-SAT model build +
refinement + final estimate); setup = the part before refinement starts (design space, dominance
pruning, coefficients, model build). The LAST line is the headline: the largest case's solve wall time.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scaleacross_opt.errors import InfeasibleError
from scaleacross_opt.io import check_loaded_instance, load_model
from scaleacross_opt.optimizer import SolveResult, solve
from scaleacross_opt.spec import Building, Cluster, Instance, Job, Link, ModelSpec, Plan, Precision

REPO = Path(__file__).resolve().parent.parent
H100 = "H100-SXM-80GB"
H800 = "H800"
NIC_GBPS = 400  # per GPU, both H100 and H800 DGX-style nodes (8 × 400G)


def model(name: str) -> ModelSpec:
    """A model file from the repository's ``models/``."""
    return load_model(REPO / "models" / f"{name}.yaml")


DENSE_1T = ModelSpec(
    name="dense-1t",
    source="synthetic: Llama-3-style GQA + SwiGLU scaled to ~1.0T parameters (192 layers × 5.3B + embeddings)",
    layers=192, hidden_size=20480, ffn_hidden_size=71680, num_heads=160, num_kv_heads=16,
    vocab_size=128256,
)


def cross_gbps(gpus_per_building: int, oversubscription: float, peers: int) -> float:
    """Per-link Gb/s: the building's scale-out capacity ÷ oversubscription, spread over its peers."""
    return round(gpus_per_building * NIC_GBPS / oversubscription / peers)


def full_mesh(names: list[str], gbps: float, latency_us: float) -> list[Link]:
    """One link between every pair of buildings."""
    return [Link(a=a, b=b, bandwidth_gbps=gbps, latency_us=latency_us)
            for i, a in enumerate(names) for b in names[i + 1:]]


def ring(names: list[str], gbps: float, latency_us: float) -> list[Link]:
    """Links between consecutive buildings, and from the last back to the first."""
    return [Link(a=a, b=b, bandwidth_gbps=gbps, latency_us=latency_us)
            for a, b in zip(names, names[1:] + names[:1], strict=True)]


def instance(name: str, description: str, gpu: str, buildings: int, gpus_per_building: int,
             links: Callable[[list[str]], list[Link]], job_model: ModelSpec, seq_len: int, batch: int,
             precision: Precision = Precision.BF16) -> Instance:
    """A homogeneous multi-building instance, checked like a loaded file."""
    names = [f"bldg-{i + 1}" for i in range(buildings)]
    built = Instance(
        name=name, description=description,
        cluster=Cluster(buildings=[Building(name=n, gpu=gpu, num_gpus=gpus_per_building) for n in names],
                        links=links(names)),
        job=Job(model=job_model, seq_len=seq_len, global_batch_size=batch, precision=precision),
    )
    return check_loaded_instance(built, "<generated>")


@dataclass(frozen=True)
class Case:
    """One benchmark case: how to build the instance and how long the solver may search."""

    name: str
    time_limit_s: float
    build: Callable[[], Instance]


def cases() -> list[Case]:
    """All cases, smallest first."""
    return [
        Case("1b-1k-llama3-70b", 20, lambda: instance(
            "1b-1k-llama3-70b", "1 × 1,024 H100, Llama 3 70B", H100, 1, 1024, lambda _: [],
            model("llama3-70b"), 8192, 512)),
        Case("2b-16k-llama3-405b", 20, lambda: instance(
            "2b-16k-llama3-405b", "2 × 8,192 H100, campus 150 µs, 1:2.8", H100, 2, 8192,
            lambda names: full_mesh(names, cross_gbps(8192, 2.8, 1), 150),
            model("llama3-405b"), 8192, 2048)),
        Case("4b-8k-deepseek-v3", 20, lambda: instance(
            "4b-8k-deepseek-v3", "4 × 2,048 H800, DeepSeek-V3 FP8, full mesh, 150 µs, 1:2.8", H800, 4, 2048,
            lambda names: full_mesh(names, cross_gbps(2048, 2.8, 3), 150),
            model("deepseek-v3"), 4096, 15360, Precision.FP8)),
        Case("5b-100k-llama3-405b", 30, lambda: instance(
            "5b-100k-llama3-405b", "5 × 20,480 H100, Llama-4-like fabric, 200 µs, 1:2.8", H100, 5, 20480,
            lambda names: full_mesh(names, cross_gbps(20480, 2.8, 4), 200),
            model("llama3-405b"), 8192, 5120)),
        Case("16b-1m-dense-1t", 120, lambda: instance(
            "16b-1m-dense-1t", "16 × 65,536 H100 in a ring, 200 µs per hop, 1:2.8; ~1T dense", H100, 16, 65536,
            lambda names: ring(names, cross_gbps(65536, 2.8, 2), 200),
            DENSE_1T, 8192, 65536)),
    ]


def plan_line(plan: Plan) -> str:
    """The plan in one short line."""
    placement = plan.placement
    assert placement is not None
    shares = "+".join(str(s.pp_stages) for s in placement.buildings)
    replicas = "+".join(str(s.dp_replicas) for s in placement.buildings)
    across = {"none": "in one building", "pp": f"pp across (stages {shares})",
              "dp": f"dp across (replicas {replicas})",
              "pp+dp": f"pp+dp across (stages {shares}, replicas {replicas})"}[placement.cross_building.value]
    if len(placement.buildings) > 6:  # 16 buildings: summarise instead of listing
        across = f"{placement.cross_building.value} across {len(placement.buildings)} buildings"
    return (f"tp{plan.tp} cp{plan.cp} pp{plan.pp} dp{plan.dp} ep{plan.ep} v{plan.virtual_stages} "
            f"mbs{plan.micro_batch_size} {plan.schedule} {plan.recompute.value}-rc ZeRO-{plan.zero_stage}; {across}")


COLUMNS = (("case", 20, "<"), ("bldgs", 5, ">"), ("GPUs", 9, ">"), ("wall s", 6, ">"), ("setup s", 7, ">"),
           ("status", 18, "<"), ("rounds", 6, ">"), ("sim'd", 5, ">"), ("step s", 7, ">"), ("MFU %", 5, ">"),
           ("gap %", 6, ">"))


def row(values: list[str], tail: str) -> str:
    """One table row: the fixed columns, then the free-text plan (or error)."""
    return "  ".join(f"{v:{align}{width}}" for v, (_, width, align) in zip(values, COLUMNS, strict=True)) + "  " + tail


def run(case: Case, time_limit_s: float, seed: int, top_k: int, verbose: bool) -> tuple[Instance, float]:
    """Build and solve one case; print its row; return the instance and the solve wall time."""
    inst = case.build()
    marks: list[float] = []

    def progress(message: str) -> None:
        marks.append(time.perf_counter())
        if verbose:
            print(f"  [{case.name} +{marks[-1] - start:7.2f} s] {message}", file=sys.stderr, flush=True)

    start = time.perf_counter()
    result: SolveResult | None = None
    error = ""
    try:
        result = solve(inst, time_limit_s=time_limit_s, seed=seed, top_k=top_k, progress=progress)
    except InfeasibleError as err:
        error = f"INFEASIBLE: {err.reason}"
    except Exception as err:  # a crash is reported in the row; the next case still runs
        error = f"ERROR {type(err).__name__}: {err}"
    wall = time.perf_counter() - start
    setup = f"{marks[0] - start:.1f}" if marks else "-"
    head = [case.name, str(len(inst.cluster.buildings)), f"{inst.num_gpus:,}", f"{wall:.1f}", setup]
    if result is None:
        print(row([*head, "infeasible" if error.startswith("INFEASIBLE") else "error", "-", "-", "-", "-", "-"],
                  error), flush=True)
        return inst, wall
    stats = result.stats
    print(row([*head, stats.status, str(stats.rounds), str(stats.candidates_simulated), f"{result.step_time_s:.3f}",
               f"{result.report.mfu * 100:.1f}", f"{stats.gap * 100:.2f}"], plan_line(result.plan)), flush=True)
    if verbose:
        print(f"  [{case.name}] refine {stats.wall_s:.1f} s (CP-SAT {stats.cpsat_wall_s:.1f} s, simulate "
              f"{stats.simulate_wall_s:.1f} s); estimate {result.estimate_step_time_s:.3f} s, CP-SAT bound "
              f"{result.cpsat_bound_s:.3f} s, lower bound {stats.lower_bound_s:.3f} s, bound error "
              f"{stats.bound_error * 100:.1f} %", file=sys.stderr, flush=True)
    return inst, wall


def main(argv: list[str] | None = None) -> int:
    """Run the cases; the last line is the largest instance's solve wall time."""
    all_cases = cases()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="halve every time limit")
    parser.add_argument("--only", choices=[c.name for c in all_cases], help="run this case only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--verbose", action="store_true", help="solver progress and timing details on stderr")
    args = parser.parse_args(argv)
    selected = [c for c in all_cases if args.only in (None, c.name)]
    print(row([name for name, _, _ in COLUMNS], "plan (or why none)"))
    largest: tuple[Instance, float] | None = None
    for case in selected:
        limit = case.time_limit_s / (2 if args.quick else 1)
        inst, wall = run(case, limit, args.seed, args.top_k, args.verbose)
        if largest is None or inst.num_gpus >= largest[0].num_gpus:
            largest = (inst, wall)
    assert largest is not None
    inst, wall = largest
    print(f"largest instance ({inst.num_gpus:,} GPUs, {len(inst.cluster.buildings)} buildings) "
          f"solve wall time: {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
