"""Design-point suite: the planner against every baseline (``compare``) on ≥ 40 design points.

Points: every shipped instance (except the infeasible one), then a grid generated from shipped ones
through ``Instance.with_updates`` (validated like a file):
- two buildings of 4,096 H100, Llama 3 70B: inter-building latency campus 150 µs / metro 1.5 ms /
  region 30 ms × bandwidth per GPU 1:1 / 1:4 / 1:16 / 1:64 oversubscription of the 400 Gb/s NICs;
- the same at 1:4 with loss 1e-5 and 1e-3 at each latency;
- 2, 4, 8 and 16 buildings sharing 8,192 H100 in a full mesh (metro, 1:8 per building's uplink, split
  over its links);
- GPU mixes (H100 + B200, H100 + H200, A100-80GB + H100) at campus 1:2.8 and region 1:16;
- MoE: Mixtral 8x22B on 2 × 4,096 H100 at each latency (1:4), DeepSeek-V3 FP8 on 2 × 1,024 H800 at
  metro and region (1:4) — against the dense Llama 3 70B points above.
Each point runs one ``compare`` (planner, production, crossdc-sota, one-at-a-time, random, annealing,
exhaustive), every search with the planner's wall time. Writes ``suite.csv`` and ``suite.png`` (speedup
over production per point) to ``--out-dir``, prints a table, the points where a baseline beat the
planner (and why), a summary per grid dimension (geometric-mean speedup of the planner over production,
crossdc-sota and the best search baseline), and LAST the headline: max and geometric-mean speedup of the planner over
production and over crossdc-sota, and the number of points where the planner is slower than any baseline.

Usage: python benchmarks/suite.py [--time-limit S] [--points N] [--out-dir DIR] [--seed N]
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from scaleacross_opt import load_instance
from scaleacross_opt.compare import (
    PLANNER,
    CompareRow,
    changed_decisions,
    compare,
    method_names,
    plan_choices,
    save_png,
)
from scaleacross_opt.errors import InfeasibleError
from scaleacross_opt.spec import Instance

ROOT = Path(__file__).resolve().parent.parent
LATENCIES_US = {"campus": 150.0, "metro": 1500.0, "region": 30000.0}
OVERSUBSCRIPTIONS = (1, 4, 16, 64)
LOSSES = (1e-5, 1e-3)
BUILDING_COUNTS = (2, 4, 8, 16)  # 3 buildings: the shipped three-buildings-campus instance
MIXES = (("H100-SXM-80GB", "B200"), ("H100-SXM-80GB", "H200-SXM-141GB"), ("A100-80GB", "H100-SXM-80GB"))
NIC_GBPS = 400.0  # H100 / H200 / B200 / H800 scale-out NIC per GPU (catalog)
DEFAULT_TIME_LIMIT_S = 6.0  # 43 points × (planner + 3 searches + exhaustive's count) ≈ 25–35 min on 2 cores
SLOWER_TOLERANCE = 1e-9  # relative: equal step times are ties, not losses
SEARCHES = ("one-at-a-time", "random", "annealing", "exhaustive")  # the per-group table's "best search"


@dataclass(frozen=True)
class Point:
    """One design point: a name, its grid dimension and the instance."""

    name: str
    group: str
    instance: Instance


def _link(a: str, b: str, gbps: float, latency_us: float, loss: float = 0.0) -> dict[str, object]:
    return {"a": a, "b": b, "bandwidth_gbps": round(gbps, 3), "latency_us": latency_us, "loss_rate": loss}


def _two(base: Instance, name: str, latency_us: float, oversub: float, loss: float = 0.0,
         gpus: tuple[str, str] | None = None) -> Instance:
    """``base`` (two buildings of equal size) with its one link (and GPUs) replaced."""
    buildings = [b.model_dump(mode="json", exclude_none=True) for b in base.cluster.buildings]
    if gpus:
        buildings = [{**b, "gpu": gpu} for b, gpu in zip(buildings, gpus, strict=True)]
    per_building = min(b["num_gpus"] for b in buildings)
    link = _link(buildings[0]["name"], buildings[1]["name"], per_building * NIC_GBPS / oversub, latency_us, loss)
    return base.with_updates({"name": name, "description": f"suite point {name}", "cluster.buildings": buildings,
                              "cluster.links": [link]}, source=name)


def _mesh(base: Instance, name: str, count: int, latency_us: float, oversub: float) -> Instance:
    """``base``'s GPUs split over ``count`` buildings, full mesh; each building's uplink (its GPUs × NIC ÷
    ``oversub``) shared by its count − 1 links."""
    total, gpu = base.num_gpus, base.cluster.buildings[0].gpu
    per = total // count
    names = [f"b{i:02d}" for i in range(count)]
    buildings = [{"name": n, "gpu": gpu if isinstance(gpu, str) else gpu.model_dump(mode="json"), "num_gpus": per}
                 for n in names]
    links = [_link(a, b, per * NIC_GBPS / oversub / (count - 1), latency_us)
             for i, a in enumerate(names) for b in names[i + 1:]]
    return base.with_updates({"name": name, "description": f"suite point {name}", "cluster.buildings": buildings,
                              "cluster.links": links, "job.num_gpus": per * count}, source=name)


def design_points() -> list[Point]:
    """Shipped instances (dense before MoE, smaller first), then the generated grid."""
    shipped = [load_instance(p) for p in sorted((ROOT / "instances").glob("*.yaml")) if "infeasible" not in p.stem]
    shipped.sort(key=lambda i: (i.job.model_spec.moe is not None, i.num_gpus, i.name or ""))
    points = [Point(i.name or "?", "shipped", i) for i in shipped]
    metro = load_instance(ROOT / "instances" / "metro-two-buildings-llama3-70b.yaml")
    for (where, latency), oversub in ((w, o) for w in LATENCIES_US.items() for o in OVERSUBSCRIPTIONS):
        name = f"70b-{where}-1to{oversub}"
        points.append(Point(name, "latency x bandwidth", _two(metro, name, latency, oversub)))
    for (where, latency), loss in ((w, loss) for w in LATENCIES_US.items() for loss in LOSSES):
        name = f"70b-{where}-1to4-loss{loss:g}"
        points.append(Point(name, "loss", _two(metro, name, latency, 4, loss)))
    for count in BUILDING_COUNTS:
        name = f"70b-{count}-buildings-metro-1to8"
        points.append(Point(name, "building count", _mesh(metro, name, count, LATENCIES_US["metro"], 8)))
    for (where, oversub), gpus in ((w, g) for w in (("campus", 2.8), ("region", 16)) for g in MIXES):
        name = f"70b-{gpus[0].split('-')[0]}+{gpus[1].split('-')[0]}-{where}"
        points.append(Point(name, "gpu mix", _two(metro, name, LATENCIES_US[where], oversub, gpus=gpus)))
    mixtral = load_instance(ROOT / "instances" / "chain-four-buildings-mixtral-8x22b.yaml")
    mixtral = _mesh(mixtral, "mixtral-2x4096", 2, LATENCIES_US["campus"], 4)
    for where, latency in LATENCIES_US.items():
        name = f"mixtral-8x22b-{where}-1to4"
        points.append(Point(name, "moe", _two(mixtral, name, latency, 4)))
    deepseek = load_instance(ROOT / "instances" / "moe-deepseek-v3-h800.yaml")
    for where in ("metro", "region"):
        name = f"deepseek-v3-{where}-1to4"
        points.append(Point(name, "moe", _two(deepseek, name, LATENCIES_US[where], 4)))
    return points


def _by_method(rows: list[CompareRow]) -> dict[str, CompareRow]:
    return {r.method: r for r in rows}


def _ratio(base: CompareRow | None, other: CompareRow | None) -> float | None:
    """t_base / t_other, the speedup of ``other`` over ``base`` (None when either has no plan)."""
    if base is None or other is None or base.step_time_s is None or other.step_time_s is None:
        return None
    return base.step_time_s / other.step_time_s


def _losses(rows: list[CompareRow]) -> list[str]:
    """Why each baseline faster than the planner won: its margin, the planner's search status, and the
    decisions the winner took differently."""
    by = _by_method(rows)
    planner = by.get(PLANNER)
    out = []
    for row in rows:
        if row.method == PLANNER or row.step_time_s is None:
            continue
        if planner is None or planner.plan is None:
            reason = planner.reason if planner else "not run"
            out.append(f"{row.method} found a plan ({row.step_time_s:.4f} s), the planner none ({reason})")
        elif row.step_time_s < planner.step_time_s * (1 - SLOWER_TOLERANCE):
            assert planner.step_time_s is not None
            changed = "; ".join(changed_decisions(planner.plan, row.plan)) if row.plan else ""
            out.append(f"{row.method} {(planner.step_time_s / row.step_time_s - 1) * 100:.2f} % faster "
                       f"({row.step_time_s:.4f} s vs {planner.step_time_s:.4f} s; planner status {planner.status}, "
                       f"{planner.simulator_calls} plans simulated); it changed: {changed}")
    return out


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _fastest(rows: list[CompareRow], methods: str | tuple[str, ...]) -> CompareRow | None:
    """The row of the fastest of ``methods`` that found a plan (None if none did)."""
    names = (methods,) if isinstance(methods, str) else methods
    found = [r for r in rows if r.method in names and r.step_time_s is not None]
    return min(found, key=lambda r: r.step_time_s or math.inf, default=None)


def _ratios(results: list[tuple[Point, list[CompareRow]]], methods: str | tuple[str, ...]) -> list[float]:
    """Per point with plans on both sides: the fastest of ``methods``' step ÷ the planner's step."""
    ratios = [_ratio(_fastest(rows, methods), _by_method(rows).get(PLANNER)) for _, rows in results]
    return [r for r in ratios if r is not None]


def _summary(results: list[tuple[Point, list[CompareRow]]], methods: str | tuple[str, ...]) -> float | None:
    """Geometric mean of ``_ratios`` (None without any point)."""
    ratios = _ratios(results, methods)
    return _geomean(ratios) if ratios else None


def _pct(ratio: float | None) -> str:
    return f"{(ratio - 1) * 100:+.1f} %" if ratio is not None else "–"


def write_csv(path: Path, results: list[tuple[Point, list[CompareRow]]]) -> None:
    """One line per point: its name, group and size, per method the step time and speedup over
    production, the planner's status and plan, and the baselines that beat the planner."""
    methods = method_names()
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["point", "group", "gpus", "buildings",
                         *(f"{m}_{col}" for m in methods for col in ("step_s", "speedup_vs_production_pct")),
                         "planner_status", "planner_plan", "baselines_faster_than_planner"])
        for point, rows in results:
            by = _by_method(rows)
            cells = []
            for m in methods:
                row = by.get(m)
                cells += [f"{row.step_time_s:.6f}" if row and row.step_time_s is not None else "",
                          f"{row.speedup_vs_production_pct:.3f}" if row and row.speedup_vs_production_pct is not None
                          else ""]
            planner = by.get(PLANNER)
            writer.writerow([point.name, point.group, point.instance.num_gpus, len(point.instance.cluster.buildings),
                             *cells, planner.status if planner else "",
                             plan_choices(planner.plan) if planner and planner.plan else "",
                             " | ".join(_losses(rows))])


def write_png(path: Path, results: list[tuple[Point, list[CompareRow]]]) -> None:
    """Speedup over production (t_production / t, log scale) per point: the planner, crossdc-sota and the
    best search baseline."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(8.0, 0.32 * len(results) + 3.0), 5.0), layout="constrained")
    ax = fig.subplots()
    x = list(range(len(results)))
    series = {"planner": PLANNER, "crossdc-sota": "crossdc-sota", "best search baseline": SEARCHES}
    for (label, members), marker in zip(series.items(), ("o", "s", "^"), strict=True):
        ys = [_ratio(_by_method(rows).get("production"), _fastest(rows, members)) for _, rows in results]
        ax.scatter(x, [math.nan if y is None else y for y in ys], marker=marker, label=label, alpha=0.8)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(x, [p.name for p, _ in results], rotation=90, fontsize="x-small")
    ax.set_ylabel("speedup over production (t_production / t)")
    ax.set_title("design-point suite: simulated step time vs the production heuristic")
    ax.legend(fontsize="small")
    save_png(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S,
                        help="planner's and each search baseline's wall seconds per point")
    parser.add_argument("--points", type=int, default=None, help="run only the first N points")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "out")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    points = design_points()
    total = len(points)
    points = points[:args.points] if args.points else points
    print(f"{len(points)} of {total} design points, {args.time_limit:g} s per search", flush=True)
    results: list[tuple[Point, list[CompareRow]]] = []
    started = time.perf_counter()
    for i, point in enumerate(points, 1):
        try:
            rows = compare(point.instance, time_limit_s=args.time_limit, seed=args.seed)
        except InfeasibleError as err:
            print(f"[{i}/{len(points)}] {point.name}: infeasible ({err.reason}); skipped", flush=True)
            continue
        results.append((point, rows))
        by = _by_method(rows)
        print(f"[{i}/{len(points)}] {point.name}: planner {_pct(_ratio(by.get('production'), by.get(PLANNER)))} "
              f"vs production, {_pct(_ratio(by.get('crossdc-sota'), by.get(PLANNER)))} vs crossdc-sota "
              f"({time.perf_counter() - started:.0f} s elapsed)", flush=True)
    write_csv(args.out_dir / "suite.csv", results)
    write_png(args.out_dir / "suite.png", results)
    print(f"\n{'point':<40}{'group':<20}{'GPUs':>8}{'planner (s)':>13}{'vs production':>15}{'vs crossdc':>12}"
          f"{'best baseline':>16}")
    losing: list[tuple[Point, list[str]]] = []
    for point, rows in results:
        by = _by_method(rows)
        planner = by.get(PLANNER)
        baselines = [r for r in rows if r.method != PLANNER and r.step_time_s is not None]
        best = min(baselines, key=lambda r: r.step_time_s or math.inf, default=None)
        step = f"{planner.step_time_s:.4f}" if planner and planner.step_time_s is not None else "no plan"
        print(f"{point.name:<40}{point.group:<20}{point.instance.num_gpus:>8,}{step:>13}"
              f"{_pct(_ratio(by.get('production'), planner)):>15}{_pct(_ratio(by.get('crossdc-sota'), planner)):>12}"
              f"{best.method if best else '–':>16}")
        if losses := _losses(rows):
            losing.append((point, losses))
    print(f"\nwritten: {args.out_dir / 'suite.csv'}, {args.out_dir / 'suite.png'}")
    for point, losses in losing:
        for loss in losses:
            print(f"planner beaten at {point.name}: {loss}")
    print(f"\n{'group':<22}{'points':>7}{'vs production':>15}{'vs crossdc-sota':>17}{'vs best search':>16}"
          f"{'planner slower':>16}")
    for group in dict.fromkeys(p.group for p, _ in results):
        members = [(p, rows) for p, rows in results if p.group == group]
        slower = sum(1 for p, _ in losing if p.group == group)
        print(f"{group:<22}{len(members):>7}{_pct(_summary(members, 'production')):>15}"
              f"{_pct(_summary(members, 'crossdc-sota')):>17}{_pct(_summary(members, SEARCHES)):>16}{slower:>16}")
    vs_prod = _ratios(results, "production")
    vs_cross = _ratios(results, "crossdc-sota")
    print(f"\nheadline ({len(results)} points, {args.time_limit:g} s per search, "
          f"{time.perf_counter() - started:.0f} s): planner over production: max {_pct(max(vs_prod, default=None))}, "
          f"geometric mean {_pct(_geomean(vs_prod) if vs_prod else None)} ({len(vs_prod)} points); "
          f"over crossdc-sota: max {_pct(max(vs_cross, default=None))}, geometric mean "
          f"{_pct(_geomean(vs_cross) if vs_cross else None)} ({len(vs_cross)} points where it has a plan); "
          f"planner slower than a baseline at {len(losing)} of {len(results)} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
