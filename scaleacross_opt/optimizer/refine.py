"""Simulator-in-the-loop refinement around the CP-SAT model.

Each round solves the model (its optimum is a lower bound on every plan not yet simulated), keeps up
to ``top_k`` distinct improving solutions of that solve, checks each with the independent validator,
simulates the valid ones and cuts every examined plan off with a no-good. The loop stops when the
bound, corrected by the largest overestimate the bound has shown (``bound_error``), cannot beat the
best simulated plan: then that plan is optimal for the simulator (exactly so while the bound is a
true lower bound, i.e. ``bound_error`` ≤ 0), or when the time limit ends the search.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ..cost.report import StepReport
from ..spec import Instance, Plan
from ..validation.plan_checks import validate_plan
from .cpsat.extract import Values, add_nogood, extract_plan
from .cpsat.variables import PlanVars
from .result import SolveStats

US = 1e-6


@dataclass
class Candidate:
    """One examined plan."""

    plan: Plan
    bound_s: float
    report: StepReport | None  # None when the validator rejected it


class _Collector(cp_model.CpSolverSolutionCallback):
    """Keeps the objective and plan literals' values of every improving solution."""

    def __init__(self, pv: PlanVars, limit: int):
        super().__init__()
        self.pv = pv
        self.limit = limit
        self.solutions: list[tuple[float, Plan, dict[int, int]]] = []

    def on_solution_callback(self) -> None:
        values = Values(self)
        plan = extract_plan(self.pv, values)
        snapshot = {v.Index(): int(self.Value(v)) for v in _identity_vars(self.pv)}
        self.solutions.append((self.ObjectiveValue() * US, plan, snapshot))
        del self.solutions[: -self.limit]


def _identity_vars(pv: PlanVars) -> list[cp_model.IntVar]:
    out = []
    for choice in (pv.shape, pv.pp, pv.dp, pv.zero, pv.schedule_chunks, pv.mode, pv.intra_algorithm,
                   pv.intra_transport, pv.cross_algorithm, pv.cross_transport):
        if choice is not None:
            out += choice.lits
    return out + pv.replicas + pv.stages + pv.layers


class _Snapshot:
    """A stored solution, readable like a solver."""

    def __init__(self, values: dict[int, int]):
        self._values = values

    def Value(self, var: cp_model.IntVar) -> int:  # noqa: N802 (mirrors the OR-Tools API)
        return self._values[var.Index()]

    def BooleanValue(self, lit: cp_model.IntVar) -> bool:  # noqa: N802
        return bool(self._values[lit.Index()])


def refine(pv: PlanVars, simulate: Callable[[Instance, Plan], StepReport], *, time_limit_s: float, seed: int,
           top_k: int, progress: Callable[[str], None] | None = None) -> tuple[Candidate | None, SolveStats]:
    """Run the loop; returns the best simulated candidate (None if no valid plan exists) and stats."""
    start = time.perf_counter()
    stats = SolveStats(status="exhausted")
    best: Candidate | None = None
    ratios: list[float] = []
    hint: dict[int, int] | None = None
    while True:
        remaining = time_limit_s - (time.perf_counter() - start)
        if remaining <= 0:
            stats.status = "time_limit"
            break
        solver = cp_model.CpSolver()
        solver.parameters.random_seed = seed
        solver.parameters.num_workers = 1
        solver.parameters.max_deterministic_time = max(remaining, 0.05)
        solver.parameters.max_time_in_seconds = max(2 * remaining, 0.1)
        pv.model.ClearHints()
        if hint:
            for var in _identity_vars(pv):
                pv.model.AddHint(var, hint[var.Index()])
        collector = _Collector(pv, top_k)
        t0 = time.perf_counter()
        status = solver.Solve(pv.model, collector)
        stats.cpsat_wall_s += time.perf_counter() - t0
        stats.rounds += 1
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE) or not collector.solutions:
            if status == cp_model.UNKNOWN:
                stats.status = "time_limit"
            break
        bound_s = solver.BestObjectiveBound() * US
        correction = 1 + max(0.0, stats.bound_error)
        stats.lower_bound_s = bound_s / correction
        if best is not None and bound_s / correction >= best.report.step_time_s * (1 - 1e-9):
            stats.status = "optimal" if stats.bound_error <= 0 else "within_bound_error"
            break
        optimal_round = status == cp_model.OPTIMAL
        for rank, (bound, plan, snapshot) in enumerate(reversed(collector.solutions)):  # best first
            add_nogood(pv, Values(_Snapshot(snapshot)))
            problems = validate_plan(plan, pv.instance)
            if problems:
                stats.candidates_rejected += 1
                continue
            t0 = time.perf_counter()
            report = simulate(pv.instance, plan)
            stats.simulate_wall_s += time.perf_counter() - t0
            stats.candidates_simulated += 1
            if rank == 0 and optimal_round:  # only the optimum's objective is tight for its plan
                ratio = bound / report.step_time_s
                ratios.append(ratio)
                stats.bound_error = max(stats.bound_error, ratio - 1)
                if ratio > 1.001:
                    import sys; print("OVER", ratio, plan.model_dump_json(exclude={'network'}), report.breakdown, file=sys.stderr)
            if best is None or report.step_time_s < best.report.step_time_s:
                best = Candidate(plan, bound, report)
                hint = snapshot
            stats.history.append({"bound_s": bound, "simulated_s": report.step_time_s, "plan": plan})
            if progress:
                progress(f"round {stats.rounds}: bound {bound:.4f} s, simulated {report.step_time_s:.4f} s, "
                         f"best {best.report.step_time_s:.4f} s")
    stats.wall_s = time.perf_counter() - start
    stats.bound_ratio_min = min(ratios) if ratios else 0.0
    if best is not None:
        if stats.status == "exhausted":
            stats.lower_bound_s = best.report.step_time_s
        stats.gap = max(0.0, (best.report.step_time_s - stats.lower_bound_s) / best.report.step_time_s)
    return best, stats
