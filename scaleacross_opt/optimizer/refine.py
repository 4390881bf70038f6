"""Simulator-in-the-loop refinement around the CP-SAT model.

Start plans (the production heuristic) are simulated first and cut off. Then each round:
1. *Bound*: solve the model (parallel portfolio). Its optimum V is a lower bound on the step of every
   plan not yet examined (exactly so where the linearisation is a true relaxation).
2. *Stop?* If V, corrected by the largest overestimate the bound has shown so far (``bound_error``),
   is no better than the best simulated plan, that plan is optimal for the simulator.
3. *Candidates*: the ``top_k`` best distinct plans among the solve's improving solutions (its optimum
   first). When the search converges the answer does not depend on which ties a round met first.
4. *Feed back*: every candidate is checked by the independent validator and simulated (once per
   plan), its exact bound is computed (its decisions fixed), and it is cut off in the model with a
   no-good, so the next round's V bounds only unexamined plans.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ..cost.report import StepReport
from ..spec import Instance, Plan
from ..validation.plan_checks import validate_plan
from .cpsat.extract import add_nogood, identity_vars, plan_assignment, plan_of
from .cpsat.variables import PlanVars
from .result import SolveStats

US = 1e-6
WORKERS = 8  # CP-SAT portfolio size (the optimum value does not depend on it)
ROUND_SHARE = 3  # a round's solve may use 1/3 of the time left …
ROUND_MIN_S = 2.0  # … but at least this long


@dataclass
class Candidate:
    """One simulated plan."""

    plan: Plan
    bound_s: float
    report: StepReport


INTERRUPT_SLACK_S = 0.5  # a round ending this much before its limit without a proof was interrupted


def _solver(seed: int, workers: int, time_s: float) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.random_seed = seed
    solver.parameters.num_workers = workers
    solver.parameters.max_time_in_seconds = max(time_s, 0.05)
    return solver


class _Improving(cp_model.CpSolverSolutionCallback):
    """Records the identity assignment and objective of every improving solution of one solve, and ends
    the solve at its share of time once it has a solution; a solve with none by then runs on until half
    a share after its first one (it improves on the hint only after its presolve)."""

    def __init__(self, keys: list[cp_model.IntVar], solver: cp_model.CpSolver, share_s: float):
        super().__init__()
        self.keys = keys
        self.found: list[tuple[int, dict[int, int]]] = []
        self.solver = solver
        self.share_s = share_s
        self.share_over = False  # the round's share of time has passed
        self.stopped = False  # this callback (not a time limit or an interrupt) ended the search
        self._timers = [threading.Timer(share_s, self._share_passed)]

    def __enter__(self) -> _Improving:
        self._start(self._timers[0])
        return self

    def __exit__(self, *exc: object) -> None:
        for timer in self._timers:
            timer.cancel()

    @staticmethod
    def _start(timer: threading.Timer) -> None:
        timer.daemon = True
        timer.start()

    def _stop(self) -> None:
        self.stopped = True
        self.solver.stop_search()

    def _share_passed(self) -> None:
        self.share_over = True
        if self.found:
            self._stop()

    def on_solution_callback(self) -> None:
        self.found.append((int(self.ObjectiveValue()), {v.Index(): int(self.Value(v)) for v in self.keys}))
        if self.share_over and len(self.found) == 1:
            self._timers.append(threading.Timer(self.share_s / 2, self._stop))
            self._start(self._timers[-1])


def _best_distinct(found: list[tuple[int, dict[int, int]]], top_k: int) -> list[dict[int, int]]:
    """The top_k distinct assignments by objective, best first (ties in a canonical order)."""
    unique: dict[tuple, tuple[int, dict[int, int]]] = {}
    for objective, assignment in found:
        key = tuple(sorted(assignment.items()))
        if key not in unique or objective < unique[key][0]:
            unique[key] = (objective, assignment)
    ranked = sorted(unique.items(), key=lambda item: (item[1][0], item[0]))
    return [assignment for _, (_, assignment) in ranked[:top_k]]


def plan_bound_us(pv: PlanVars, assignment: dict[int, int], seed: int, deadline: float | None = None) -> int | None:
    """The CP-SAT objective of one plan: its identity variables fixed, the rest minimised (None when the
    model does not admit the plan)."""
    model = pv.model.clone()
    for index, value in assignment.items():
        var = model.get_int_var_from_proto_index(index)
        model.Add(var == value)
    budget = 10.0 if deadline is None else min(10.0, max(0.05, deadline - time.perf_counter()))
    solver = _solver(seed, 1, budget)
    status = solver.Solve(model)
    if status == cp_model.INFEASIBLE:
        return None
    return int(solver.ObjectiveValue()) if status == cp_model.OPTIMAL else int(solver.BestObjectiveBound())


def refine(pv: PlanVars, simulate: Callable[[Instance, Plan], StepReport], *, deadline: float, seed: int,
           top_k: int, start_plans: list[Plan] = (), progress: Callable[[str], None] | None = None
           ) -> tuple[Candidate | None, SolveStats]:
    """Run the loop until ``deadline`` (a ``time.perf_counter()`` value); returns the best simulated
    candidate (None if no valid plan exists) and stats. ``start_plans`` (heuristic plans) are simulated
    first, so the result is never worse than they are."""
    start = time.perf_counter()
    stats = SolveStats(status="exhausted")
    best: Candidate | None = None
    hint: dict[int, int] | None = None
    ratios: list[float] = []
    examined: set[str] = set()
    try:
        for start_plan in start_plans:  # in the model's own form (its layer-split family), if it has one
            assignment = plan_assignment(pv, start_plan)
            if assignment is None:
                continue
            plan = plan_of(pv, assignment)
            bound_us = plan_bound_us(pv, assignment, seed, deadline)
            if bound_us is None or validate_plan(plan, pv.instance):
                continue
            bound = bound_us * US
            examined.add(plan.model_dump_json())
            report = simulate(pv.instance, plan)
            stats.candidates_simulated += 1
            add_nogood(pv.model, assignment)
            ratios.append(bound / report.step_time_s)
            stats.bound_error = max(stats.bound_error, ratios[-1] - 1)
            if best is None or report.step_time_s < best.report.step_time_s:
                best, hint = Candidate(plan, bound, report), assignment
            if progress:
                progress(_status_line(start, stats, best, f"start plan {plan.schedule} tp={plan.tp} pp={plan.pp}: "
                                                          f"simulated {report.step_time_s:.4f} s"))
    except KeyboardInterrupt:  # Ctrl-C while simulating the start plans: keep the best of them
        if best is None:
            raise
        stats.status = "interrupted"
    else:
        best = _rounds(pv, simulate, start, deadline, seed, top_k, progress, stats, best, hint, ratios, examined)
    stats.wall_s = time.perf_counter() - start
    stats.bound_ratio_min = min(ratios) if ratios else 0.0
    if best is not None:
        if stats.status == "exhausted":
            stats.lower_bound_s = best.report.step_time_s
        stats.lower_bound_s = min(stats.lower_bound_s, best.report.step_time_s)  # the optimum is ≤ the best
        stats.gap = max(0.0, (best.report.step_time_s - stats.lower_bound_s) / best.report.step_time_s)
    return best, stats


def _status_line(start: float, stats: SolveStats, best: Candidate | None, event: str) -> str:
    """A progress line: elapsed seconds, the event, the best simulated step, the proven bound and gap."""
    line = f"[{time.perf_counter() - start:6.1f} s] {event}"
    if best is not None:
        line += f"; best {best.report.step_time_s:.4f} s"
        if stats.lower_bound_s > 0:
            gap = max(0.0, 1 - stats.lower_bound_s / best.report.step_time_s)
            line += f", bound {stats.lower_bound_s:.4f} s (gap {100 * gap:.1f} %)"
    return line


def _rounds(pv: PlanVars, simulate: Callable[[Instance, Plan], StepReport], start: float, deadline: float, seed: int,
            top_k: int, progress: Callable[[str], None] | None, stats: SolveStats, best: Candidate | None,
            hint: dict[int, int] | None, ratios: list[float], examined: set[str]) -> Candidate | None:
    """The CP-SAT rounds of ``refine`` (updating ``stats``, ``ratios`` and ``examined``); returns the best
    candidate. On Ctrl-C it returns the best so far with status ``interrupted`` (re-raises if none)."""
    try:
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                stats.status = "time_limit"
                break
            t0 = time.perf_counter()
            pv.model.ClearHints()
            for index, value in sorted((hint or {}).items()):
                pv.model.AddHint(pv.model.get_int_var_from_proto_index(index), value)
            # A round gets a share of the time left, so a slow proof still leaves rounds for simulation; a
            # round with no solution at the end of its share goes on (up to the deadline) until its first one.
            share = min(remaining, max(ROUND_MIN_S, remaining / ROUND_SHARE))
            solver = _solver(seed, WORKERS, remaining)
            with _Improving(identity_vars(pv), solver, share) as recorder:
                status = solver.Solve(pv.model, recorder)
            # CP-SAT catches Ctrl-C and just ends the search; a round that stops early without a proof or
            # its own stop was interrupted, so the interrupt is passed on
            if (status in (cp_model.FEASIBLE, cp_model.UNKNOWN) and not recorder.stopped
                    and solver.WallTime() < remaining - INTERRUPT_SLACK_S):
                raise KeyboardInterrupt
            stats.rounds += 1
            if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                stats.cpsat_wall_s += time.perf_counter() - t0
                if status == cp_model.UNKNOWN:
                    stats.status = "time_limit"
                break
            optimum_us = int(solver.ObjectiveValue())
            bound_s = (optimum_us if status == cp_model.OPTIMAL else solver.BestObjectiveBound()) * US
            correction = 1 + max(0.0, stats.bound_error)
            stats.lower_bound_s = max(stats.lower_bound_s, bound_s / correction)  # later rounds bound fewer plans
            if best is not None and bound_s / correction >= best.report.step_time_s * (1 - 1e-9):
                stats.cpsat_wall_s += time.perf_counter() - t0
                stats.status = "optimal" if stats.bound_error <= 0 else "within_bound_error"
                break
            found = _best_distinct(recorder.found, top_k)
            # Several assignments can describe one plan (layer counts the split trims away); the plan's bound
            # is its canonical assignment's, and every assignment of an examined plan is cut off.
            plans = [plan_of(pv, assignment) for assignment in found]
            canonical = [plan_assignment(pv, plan) or assignment for plan, assignment in zip(plans, found, strict=True)]
            # past the deadline a plan's bound is not computed (0: unknown) and only a first plan is simulated
            bounds = [(plan_bound_us(pv, c, seed, deadline) or 0) * US if time.perf_counter() < deadline else 0.0
                      for c in canonical]
            stats.cpsat_wall_s += time.perf_counter() - t0
            for assignment, same, plan, plan_bound in zip(found, canonical, plans, bounds, strict=True):
                if best is not None and time.perf_counter() > deadline:
                    break
                add_nogood(pv.model, assignment)
                if same != assignment:
                    add_nogood(pv.model, same)
                key = plan.model_dump_json()
                if key in examined:
                    continue
                examined.add(key)
                problems = validate_plan(plan, pv.instance)
                if problems:
                    stats.candidates_rejected += 1
                    continue
                t1 = time.perf_counter()
                report = simulate(pv.instance, plan)
                stats.simulate_wall_s += time.perf_counter() - t1
                stats.candidates_simulated += 1
                if plan_bound > 0:
                    ratios.append(plan_bound / report.step_time_s)
                    stats.bound_error = max(stats.bound_error, ratios[-1] - 1)
                if best is None or (report.step_time_s, plan.model_dump_json()) < (
                        best.report.step_time_s, best.plan.model_dump_json()):
                    best, hint = Candidate(plan, plan_bound, report), assignment
                stats.history.append({"bound_s": plan_bound, "simulated_s": report.step_time_s})
                if progress:
                    progress(_status_line(start, stats, best, f"round {stats.rounds}: plan bound {plan_bound:.4f} s, "
                                                              f"simulated {report.step_time_s:.4f} s"))
    except KeyboardInterrupt:  # Ctrl-C: keep the best plan found so far (none yet: stop like before)
        if best is None:
            raise
        stats.status = "interrupted"
    return best
