"""Simulator-in-the-loop refinement around the CP-SAT model.

Each round:
1. *Bound*: solve the model (parallel portfolio). Its optimum V is a lower bound on the step of every
   plan not yet examined (exactly so where the linearisation is a true relaxation).
2. *Stop?* If V, corrected by the largest overestimate the bound has shown so far (``bound_error``),
   is no better than the best simulated plan, that plan is optimal for the simulator.
3. *Candidates*: in a copy of the model restricted to step ≤ V·(1 + ``NEAR_OPTIMAL``), a single-worker
   search with the seed finds up to ``top_k`` distinct plans one after another (no-good cuts between
   them). Single worker + seed makes the choice among equally good plans deterministic.
4. *Feed back*: every candidate is checked by the independent validator and simulated, and cut off
   in the model with a no-good, so the next round's V bounds only unexamined plans.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ..cost.report import StepReport
from ..spec import Instance, Plan
from ..validation.plan_checks import validate_plan
from .cpsat.extract import Values, add_nogood, extract_plan, identity_vars
from .cpsat.variables import PlanVars
from .result import SolveStats

US = 1e-6
NEAR_OPTIMAL = 0.02  # candidates come from within 2 % of the round's bound
WORKERS = 8  # CP-SAT portfolio size (the optimum value does not depend on it)


@dataclass
class Candidate:
    """One simulated plan."""

    plan: Plan
    bound_s: float
    report: StepReport


class _Snapshot:
    """A stored assignment, readable like a solver."""

    def __init__(self, values: dict[int, int]):
        self._values = values

    def Value(self, var: cp_model.IntVar) -> int:  # noqa: N802 (mirrors the OR-Tools API)
        return self._values[var.Index()]

    def BooleanValue(self, lit: cp_model.IntVar) -> bool:  # noqa: N802
        return bool(self._values[lit.Index()])


def _solver(seed: int, workers: int, time_s: float) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.random_seed = seed
    solver.parameters.num_workers = workers
    solver.parameters.max_time_in_seconds = max(time_s, 0.05)
    return solver


class _Improving(cp_model.CpSolverSolutionCallback):
    """Records the identity assignment and objective of every improving solution of one solve."""

    def __init__(self, keys: list[cp_model.IntVar]):
        super().__init__()
        self.keys = keys
        self.found: list[tuple[int, dict[int, int]]] = []

    def on_solution_callback(self) -> None:
        self.found.append((int(self.ObjectiveValue()), {v.Index(): int(self.Value(v)) for v in self.keys}))


def _near_optimal(found: list[tuple[int, dict[int, int]]], limit_us: int, top_k: int) -> list[dict[int, int]]:
    """Distinct assignments with objective ≤ limit, best first (ties in a canonical order), at most top_k."""
    unique: dict[tuple, tuple[int, dict[int, int]]] = {}
    for objective, assignment in found:
        key = tuple(sorted(assignment.items()))
        if objective <= limit_us and (key not in unique or objective < unique[key][0]):
            unique[key] = (objective, assignment)
    ranked = sorted(unique.items(), key=lambda item: (item[1][0], item[0]))
    return [assignment for _, (_, assignment) in ranked[:top_k]]


def plan_bound_us(pv: PlanVars, assignment: dict[int, int], seed: int) -> int:
    """The CP-SAT objective of one plan: its identity variables fixed, the rest minimised."""
    model = pv.model.clone()
    for index, value in assignment.items():
        var = model.get_int_var_from_proto_index(index)
        model.Add(var == value)
    solver = _solver(seed, 1, 10.0)
    status = solver.Solve(model)
    return int(solver.ObjectiveValue()) if status == cp_model.OPTIMAL else int(solver.BestObjectiveBound())


def refine(pv: PlanVars, simulate: Callable[[Instance, Plan], StepReport], *, time_limit_s: float, seed: int,
           top_k: int, progress: Callable[[str], None] | None = None) -> tuple[Candidate | None, SolveStats]:
    """Run the loop; returns the best simulated candidate (None if no valid plan exists) and stats."""
    start = time.perf_counter()
    stats = SolveStats(status="exhausted")
    best: Candidate | None = None
    ratios: list[float] = []
    while True:
        remaining = time_limit_s - (time.perf_counter() - start)
        if remaining <= 0:
            stats.status = "time_limit"
            break
        t0 = time.perf_counter()
        solver = _solver(seed, WORKERS, remaining)
        recorder = _Improving(identity_vars(pv))
        status = solver.Solve(pv.model, recorder)
        stats.rounds += 1
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            stats.cpsat_wall_s += time.perf_counter() - t0
            if status == cp_model.UNKNOWN:
                stats.status = "time_limit"
            break
        optimum_us = int(solver.ObjectiveValue())
        bound_s = (optimum_us if status == cp_model.OPTIMAL else solver.BestObjectiveBound()) * US
        correction = 1 + max(0.0, stats.bound_error)
        stats.lower_bound_s = bound_s / correction
        if best is not None and bound_s / correction >= best.report.step_time_s * (1 - 1e-9):
            stats.cpsat_wall_s += time.perf_counter() - t0
            stats.status = "optimal" if stats.bound_error <= 0 else "within_bound_error"
            break
        found = _near_optimal(recorder.found, int(optimum_us * (1 + NEAR_OPTIMAL)), top_k)
        bounds = [plan_bound_us(pv, assignment, seed) * US for assignment in found]
        stats.cpsat_wall_s += time.perf_counter() - t0
        for assignment, plan_bound in zip(found, bounds, strict=True):
            add_nogood(pv.model, assignment)
            plan = extract_plan(pv, Values(_Snapshot(assignment)))
            problems = validate_plan(plan, pv.instance)
            if problems:
                stats.candidates_rejected += 1
                continue
            t1 = time.perf_counter()
            report = simulate(pv.instance, plan)
            stats.simulate_wall_s += time.perf_counter() - t1
            stats.candidates_simulated += 1
            ratio = plan_bound / report.step_time_s
            ratios.append(ratio)
            stats.bound_error = max(stats.bound_error, ratio - 1)
            if best is None or (report.step_time_s, plan.model_dump_json()) < (
                    best.report.step_time_s, best.plan.model_dump_json()):
                best = Candidate(plan, plan_bound, report)
            stats.history.append({"bound_s": plan_bound, "simulated_s": report.step_time_s})
            if progress:
                progress(f"round {stats.rounds}: bound {plan_bound:.4f} s, simulated {report.step_time_s:.4f} s, "
                         f"best {best.report.step_time_s:.4f} s")
    stats.wall_s = time.perf_counter() - start
    stats.bound_ratio_min = min(ratios) if ratios else 0.0
    if best is not None:
        if stats.status == "exhausted":
            stats.lower_bound_s = best.report.step_time_s
        stats.gap = max(0.0, (best.report.step_time_s - stats.lower_bound_s) / best.report.step_time_s)
    return best, stats
