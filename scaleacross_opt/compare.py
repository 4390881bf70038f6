"""``compare``: the planner (``solve``) against the registered baselines, on the same simulator.

One row per method: simulated step time, speedup over ``production`` ((t_production / t − 1) · 100 %),
MFU, wall time, simulator calls and the plan. Search baselines get the planner's wall time (equal
budget); ``production`` always runs, as the reference. The readable output ends with why the planner
differs from production: the breakdown terms that shrank or grew, and the decisions it changed.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .baselines import baseline_names, run_baseline
from .baselines.registry import planner_space
from .cost.report import BREAKDOWN_KEYS, StepReport
from .errors import NoPlanInTimeError
from .io import _new_file_mode
from .optimizer.refine import DEFAULT_THREADS
from .optimizer.summary import _net
from .spec import CrossBuilding, Instance, Plan

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PLANNER = "planner"
REFERENCE = "production"
# terms whose change is below this share of production's step are not worth a line of the explanation
EXPLAIN_MIN_SHARE = 0.005


def method_names() -> list[str]:
    """Every method ``compare`` knows: the planner, production, then the other registered baselines."""
    return [PLANNER, REFERENCE, *(name for name in baseline_names() if name != REFERENCE)]


@dataclass(frozen=True)
class CompareRow:
    """One method's answer: its simulated plan (None: ``reason`` says why) and what it cost to find."""

    method: str
    plan: Plan | None
    report: StepReport | None
    wall_s: float
    simulator_calls: int
    status: str  # planner: solve's status; baselines: ok | incomplete | no_plan
    reason: str | None = None
    speedup_vs_production_pct: float | None = None

    @property
    def step_time_s(self) -> float | None:
        """Simulated step time (None without a plan)."""
        return self.report.step_time_s if self.report else None

    def to_json(self) -> dict[str, object]:
        """The ``compare --json`` row: method, step_time_s, speedup_vs_production_pct, mfu, wall_s,
        simulator_calls, plan (the full plan, replayable with ``simulate --plan``), then status, reason,
        plan_summary and breakdown."""
        return {
            "method": self.method,
            "step_time_s": self.step_time_s,
            "speedup_vs_production_pct": self.speedup_vs_production_pct,
            "mfu": self.report.mfu if self.report else None,
            "wall_s": self.wall_s,
            "simulator_calls": self.simulator_calls,
            "plan": self.plan.model_dump(mode="json") if self.plan else None,
            "status": self.status,
            "reason": self.reason,
            "plan_summary": plan_choices(self.plan) if self.plan else None,
            "breakdown": dict(self.report.breakdown) if self.report else None,
        }


def compare(instance: Instance, *, methods: list[str] | None = None, time_limit_s: float = 60.0, seed: int = 0,
            threads: int = DEFAULT_THREADS, progress: Callable[[str], None] | None = None) -> list[CompareRow]:
    """Rows for ``methods`` (default, or empty: all of ``method_names()``; ``production`` is always added),
    the planner first, then production, then the others in the given order. Every search gets
    ``time_limit_s`` wall seconds; ``threads``: the planner's CP-SAT workers per round. Raises
    ``InfeasibleError`` when no plan can exist (proven), KeyError for an unknown method."""
    from .optimizer import solve

    wanted = list(dict.fromkeys(methods or method_names()))
    unknown = [m for m in wanted if m not in method_names()]
    if unknown:
        raise KeyError(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(method_names())}")
    order = [m for m in (PLANNER, REFERENCE) if m in wanted or m == REFERENCE]
    order += [m for m in wanted if m not in order]
    planner_space(instance)  # fail fast (InfeasibleError) before any search runs
    rows: list[CompareRow] = []
    for method in order:
        if progress:
            progress(f"{method}: running" + (f" (up to {time_limit_s:g} s)" if method == PLANNER else ""))
        if method == PLANNER:
            try:
                result = solve(instance, time_limit_s=time_limit_s, seed=seed, threads=threads)
                row = CompareRow(PLANNER, result.plan, result.report, result.stats.wall_s,
                                 result.stats.candidates_simulated, result.status)
            except NoPlanInTimeError as err:
                row = CompareRow(PLANNER, None, None, time_limit_s, 0, "no_plan_in_time", err.reason)
        else:
            found = run_baseline(method, instance, time_limit_s=time_limit_s, seed=seed)
            status = "no_plan" if found.plan is None else "incomplete" if found.reason else "ok"
            row = CompareRow(method, found.plan, found.report, found.wall_s, found.simulator_calls, status,
                             found.reason)
        if progress:
            progress(f"{method}: " + (f"{row.step_time_s:.4f} s" if row.report else f"no plan ({row.reason})")
                     + f" in {row.wall_s:.1f} s, {row.simulator_calls} simulator calls")
        rows.append(row)
    reference = next((r.step_time_s for r in rows if r.method == REFERENCE), None)
    return [r if r.step_time_s is None or reference is None else
            replace(r, speedup_vs_production_pct=(reference / r.step_time_s - 1) * 100)
            for r in rows]


def plan_choices(plan: Plan) -> str:
    """The plan's key choices on one line: degrees, schedule, per-GPU choices, what crosses buildings
    (and each building's share), network per traffic class."""
    assert plan.placement is not None and plan.network is not None
    mode = plan.placement.cross_building
    shares = ", ".join(f"{s.building} {s.dp_replicas}×{s.pp_stages}" for s in plan.placement.buildings)
    where = "one building" if mode is CrossBuilding.NONE else f"{mode.value} across ({shares} replicas×stages)"
    text = (f"tp{plan.tp} cp{plan.cp} pp{plan.pp} dp{plan.dp} ep{plan.ep}; {plan.schedule} v{plan.virtual_stages} "
            f"mbs{plan.micro_batch_size}; recompute {plan.recompute.value}; ZeRO-{plan.zero_stage}"
            f"{'; TP overlap' if plan.tp_comm_overlap and plan.tp > 1 else ''}; {where}; "
            f"intra: {_net(plan.network.intra_building)}")
    return text + ("" if mode is CrossBuilding.NONE else f"; cross: {_net(plan.network.cross_building)}")


def changed_decisions(before: Plan, after: Plan) -> list[str]:
    """The decisions ``after`` takes differently from ``before``, as 'name old → new'."""
    assert before.placement is not None and after.placement is not None
    assert before.network is not None and after.network is not None
    pairs = [(f, getattr(before, f), getattr(after, f)) for f in ("tp", "cp", "pp", "dp", "ep", "schedule",
                                                                    "virtual_stages", "micro_batch_size",
                                                                    "recompute", "zero_stage", "tp_comm_overlap")]
    pairs.append(("cross-building", before.placement.cross_building, after.placement.cross_building))
    crosses = after.placement.cross_building is not CrossBuilding.NONE
    for cls in ("intra_building", "cross_building") if crosses else ("intra_building",):
        old_net, new_net = getattr(before.network, cls), getattr(after.network, cls)
        pairs += [(f"{cls.split('_')[0]} {f.replace('_', ' ')}", getattr(old_net, f), getattr(new_net, f))
                  for f in type(old_net).model_fields]
    return [f"{name} {_word(old)} → {_word(new)}" for name, old, new in pairs if old != new]


def _word(value: object) -> str:
    """An option as the plan file writes it (enum values, lower-case booleans)."""
    return str(value).lower() if isinstance(value, bool) else str(getattr(value, "value", value))


def explanation(rows: list[CompareRow]) -> list[str]:
    """Why the planner's step differs from production's: the breakdown terms that changed by at least
    ``EXPLAIN_MIN_SHARE`` of production's step (seconds, largest first), the decisions it changed, and
    any baseline faster than the planner."""
    by_method = {r.method: r for r in rows}
    planner, production = by_method.get(PLANNER), by_method.get(REFERENCE)
    if not (planner and production and planner.report and production.report and planner.plan and production.plan):
        return ["explanation: needs a planner and a production plan to compare"]
    t_plan, t_prod = planner.report.step_time_s, production.report.step_time_s
    deltas = sorted(((planner.report.breakdown[k] - production.report.breakdown[k], k) for k in BREAKDOWN_KEYS),
                    key=lambda item: -abs(item[0]))
    terms = [f"{k.removesuffix('_s')} {'shrank' if d < 0 else 'grew'} by {abs(d):.3f} s"
             for d, k in deltas if abs(d) >= EXPLAIN_MIN_SHARE * t_prod]
    lines = [f"explanation: the planner's step is {t_plan:.4f} s against production's {t_prod:.4f} s "
             f"({t_plan - t_prod:+.4f} s, {(t_prod / t_plan - 1) * 100:+.1f} % speedup)"]
    lines.append("  breakdown (planner − production): " + ("; ".join(terms) or "no term changed noticeably"))
    changed = changed_decisions(production.plan, planner.plan)
    lines.append("  decisions changed: " + ("; ".join(changed) if changed else "none (the same plan)"))
    faster = [r for r in rows if r.step_time_s is not None and r.step_time_s < t_plan * (1 - 1e-9)]
    lines += [f"  note: {r.method} is faster than the planner ({r.step_time_s:.4f} s): the planner's search did not "
              f"reach its plan within its time ({planner.status})" for r in faster]
    return lines


def compare_text(instance: Instance, rows: list[CompareRow]) -> str:
    """The readable table, one plan line per method, and the explanation last."""
    header = f"{'method':<15}{'step (s)':>10}{'vs production':>15}{'MFU':>8}{'wall (s)':>10}{'sim calls':>11}  status"
    lines = [f"instance {instance.name or '(unnamed)'}: {instance.num_gpus:,} GPUs, "
             f"{len(instance.cluster.buildings)} building(s), {instance.job.model_spec.name}", header]
    for r in rows:
        speedup = f"{r.speedup_vs_production_pct:+.1f} %" if r.speedup_vs_production_pct is not None else "–"
        step = f"{r.step_time_s:.4f}" if r.step_time_s is not None else "–"
        mfu = f"{r.report.mfu * 100:.1f} %" if r.report else "–"
        lines.append(f"{r.method:<15}{step:>10}{speedup:>15}{mfu:>8}{r.wall_s:>10.1f}{r.simulator_calls:>11}  "
                     + r.status + (f": {r.reason}" if r.reason else ""))
    lines.append("plans:")
    lines += [f"  {r.method:<15}{plan_choices(r.plan)}" for r in rows if r.plan]
    return "\n".join([*lines, *explanation(rows)])


def breakdown_figure(rows: list[CompareRow], title: str) -> Figure:
    """Stacked bars of each method's simulated breakdown (seconds per step); methods without a plan are
    left out."""
    from matplotlib.figure import Figure

    shown = [r for r in rows if r.report]
    fig = Figure(figsize=(1.3 * len(shown) + 3.0, 4.2), layout="constrained")
    ax = fig.subplots()
    bottoms = [0.0] * len(shown)
    for key in BREAKDOWN_KEYS:
        values = [r.report.breakdown[key] for r in shown if r.report]
        ax.bar([r.method for r in shown], values, bottom=bottoms, label=key.removesuffix("_s"))
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    ax.set_ylabel("seconds per step (simulated)")
    ax.set_title(title)
    ax.tick_params(axis="x", labelrotation=30)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def save_png(fig: Figure, path: Path) -> None:
    """Write ``fig`` as PNG through a temporary file in the same directory, renamed when complete (the
    bytes counterpart of ``io.write_atomic``); on failure (OSError re-raised) nothing partial remains."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(buffer.getvalue())
        tmp.chmod(_new_file_mode(path))
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

