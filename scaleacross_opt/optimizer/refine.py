"""Hybrid search: CP-SAT proposes, the simulator decides, local search polishes.

Start plans (every cheap baseline) are simulated first and cut off, and local search (step 5) climbs
from the best of them for up to a quarter of the time. Then each round:
1. *Bound*: solve the model (parallel portfolio) for a share of the time left, longer when it has found only the
   hint's neighbours (``_Improving``). Its optimum V is a lower bound on the step of every
   plan not yet examined (exactly so where the linearisation is a true relaxation).
2. *Stop?* If V, corrected by the largest overestimate the bound has shown so far (``bound_error``),
   is no better than the best simulated plan, that plan is optimal for the simulator.
3. *Candidates*: the ``top_k`` best distinct plans among the solve's improving solutions (its optimum
   first). When the search converges the answer does not depend on which ties a round met first.
4. *Feed back*: every candidate is checked by the independent validator and simulated (once per
   plan), its exact bound is computed (its decisions fixed), and it is cut off in the model with a
   no-good, so the next round's V bounds only unexamined plans. A ZB-V candidate across a slow boundary
   also teaches the model the crossings of its siblings' families (``CrossingCuts.learn``).
5. *Polish*: simulator-driven local search (``local_search.climb``) from the round's candidates, best
   first, then iterated local search from the incumbent (a seeded two-move kick, then a climb), for as
   long as the round's CP-SAT part (its solve and its candidates' bounds) took: the two searches get equal
   time, and the candidates' simulations count for neither (campus 405B: a 5 s solve, 6 s of candidates
   whose polish had taken the 11 s left; now a second round fits in 30 s). Every plan it simulates is cut
   off too; the incumbent becomes the next round's hint. A plan that differs from a simulated one only in
   settings the model pins as moot (``fix_irrelevant_choices``) is not simulated again.
The last round, once too little time is left for another (``is_last_round``), is not stopped at its share: it
may run on to its proof until one share is left for its candidates and polish, which makes its bound the
model's optimum instead of the root LP's.
The model also carries an *incumbent cut*, step ≤ best simulated × (1 + bound error), tightened as the
incumbent improves: a plan whose bound cannot beat the incumbent is never proposed, and a round with
no solution left proves the incumbent optimal (up to the bound error).
*Screening*: a plan is simulated only if its closed form (``screen``, ~10× faster than the simulator),
less the most the closed form has overshot the simulator (``ESTIMATE_OVERSHOOT``, or more if the search
sees more), could beat the plan it must beat — the climb's current plan, or for a round's candidates the
incumbent; a round's candidate that cannot is cut off unsimulated, and its twins in the other cross-building
dimensions are screened in its place (``_other_dimensions``).
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable

from ortools.sat.python import cp_model

from ..errors import SimulationDeadlineError
from ..simulator.paced import TimedEvaluate
from ..spec import CrossBuilding, Plan
from ..validation.plan_checks import validate_plan
from .cpsat.crossings import CrossingCuts
from .cpsat.extract import add_nogood, identity_vars, plan_assignment, plan_of
from .cpsat.terms import HORIZON_US
from .cpsat.variables import PlanVars
from .local_search import Candidate, climb, kick
from .neighbourhood import other_dimensions
from .result import SolveStats

US = 1e-6
# CP-SAT portfolio size per round (the optimum value does not depend on it). On 2 cores 4 workers prove the full
# model's optimum sooner than 8 (campus 405B 7.6 s vs 14.0 s, metro 6.0 vs 14.5, MoE 10.0 vs 17.9, three-building
# 23.5 s vs no proof in 25 s; hetero 14.9 vs 13.1), and find it sooner on most.
DEFAULT_THREADS = 4
ROUND_SHARE = 3  # a round's solve may use 1/3 of the time left …
ROUND_MIN_S = 2.0  # … but at least this long


# A round stopped at its share keeps its root LP's bound (campus 405B: 4.14 s against the model's optimum 4.67 s),
# and CP-SAT cannot resume a proof in the next round. The last round may run on to its proof through the time
# another round would have had, leaving its candidates and polish one share: under an incumbent cut near the final
# answer, 4 workers on 2 cores prove the model's optimum in 3.5 s (hetero 405B) to 5.5 s (campus 405B), 14.6 s
# and 8.2 s without the cut.
LAST_ROUND_S = 4.0


def is_last_round(elapsed_s: float, remaining_s: float, share_s: float) -> bool:
    """Whether a round about to start runs to its end: at least ``LAST_ROUND_S`` is left, the search is in
    the final third of its time (earlier, and in searches under 12 s, rounds and polishes find better plans
    than a proof would), and this round and a polish as long would leave less than ``LAST_ROUND_S``."""
    return LAST_ROUND_S <= remaining_s <= elapsed_s / 2 and remaining_s - 2 * share_s < LAST_ROUND_S


# A round's solutions within this share of its first one's objective are the hint's neighbours (``_Improving``):
# on campus 405B they were 0.2–1.4 % better than the first, the dive's own 18–24 %.
HINT_NEIGHBOURHOOD = 0.05
INTERRUPT_SLACK_S = 0.5  # a round ending this much before its limit without a proof was interrupted
# The most the closed form (cost.step.estimate) exceeds the simulated step: 4.6 % over the 881 one-factor plans of
# benchmarks/estimate_vs_simulate.py (2026-12-02), rounded up; its random plans (37th session) reach 7.1 % on one
# (a DualPipe pp+dp plan on a 4 GB/s link, far from any answer); the search raises it when it sees more.
ESTIMATE_OVERSHOOT = 0.05


def _solver(seed: int, workers: int, time_s: float) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.random_seed = seed
    solver.parameters.num_workers = workers
    solver.parameters.max_time_in_seconds = max(time_s, 0.05)
    # Probing (trying each literal of the 1,000+ shard-shape one-hot in presolve) took most of a round: off,
    # the first solution comes 2–10× sooner and the optimum 1.3–2.7× sooner (two-building 405B, 100k-GPU and
    # MoE instances); the optimum does not change.
    solver.parameters.cp_model_probing_level = 0
    # OR-Tools 9.15's presolve inclusion detection is unsound on this model: on moe-deepseek-v3-h800 it proved
    # "no solution below 14.71 s" (and the model infeasible with step ≤ 10.83 s) while a plan's assignment with
    # objective 10.83 s satisfies every constraint (found with presolve off; feasible when fixed, presolve on).
    # Off, the optimum is 10.83 s, no slower (7.0 s vs 8.4 s to optimality on one worker); see
    # tests/test_cpsat_soundness.py.
    solver.parameters.presolve_inclusion_work_limit = 0
    return solver


class _Improving(cp_model.CpSolverSolutionCallback):
    """Records the identity assignment and objective of every improving solution of one solve, and ends
    the solve at its share of time, but (if it has one by then) never sooner than half a share after its first
    solution beyond the hint's neighbours; with only those by then it runs on for half a share, and with none
    until half a share after its first (a solve improves on the hint only after its presolve). *The hint's neighbours*:
    solutions within ``HINT_NEIGHBOURHOOD`` of the solve's first, which with a hint is the hint repaired;
    CP-SAT's LNS workers find them at once, its own first solution comes from an LP-guided dive (campus
    405B, round 1: 6.48 s at 0.15 s, then 6.46 s until the dive's 5.30 s at 1.7–2.4 s of 4 workers on 2
    cores; a round ended at its 2.4 s share before the dive proposed only the start plans' neighbours, and
    its 10 s search returned their 6.58 s). The dive's first solutions can lie in a loosely bounded family
    (bounds 5.49–5.83 s, simulated 6.84–7.11 s) and the next 0.1–0.3 s bring the plans bounded at 4.97 s;
    a round that ended on the first ones returned 6.48 s."""

    def __init__(self, keys: list[cp_model.IntVar], solver: cp_model.CpSolver, share_s: float):
        super().__init__()
        self.keys = keys
        self.found: list[tuple[int, dict[int, int]]] = []
        self.solver = solver
        self.share_s = share_s
        self.share_over = False  # the round's share of time has passed
        self.stopped = False  # this callback (not a time limit or an interrupt) ended the search
        self.beyond_hint_at: float | None = None  # perf_counter() at the first solution beyond the hint's neighbours
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

    def _stop_in(self, delay_s: float) -> None:
        """End the solve ``delay_s`` from now (at once when it is not positive)."""
        if delay_s <= 0:
            self._stop()
            return
        self._timers.append(threading.Timer(delay_s, self._stop))
        self._start(self._timers[-1])

    def _share_passed(self) -> None:
        self.share_over = True
        if self.beyond_hint_at is not None:
            self._stop_in(self.beyond_hint_at + self.share_s / 2 - time.perf_counter())
        elif self.found:
            self._stop_in(self.share_s / 2)

    def on_solution_callback(self) -> None:
        self.record(int(self.ObjectiveValue()), {v.Index(): int(self.Value(v)) for v in self.keys})

    def record(self, objective: int, assignment: dict[int, int]) -> None:
        """Add one solution, noting when the first beyond the hint's neighbours came; after the share, a first
        solution ends the solve half a share later."""
        self.found.append((objective, assignment))
        beyond_hint = objective < self.found[0][0] * (1 - HINT_NEIGHBOURHOOD)  # the first's objective less the margin
        if self.beyond_hint_at is None and beyond_hint:
            self.beyond_hint_at = time.perf_counter()
        if self.share_over and len(self.found) == 1:
            self._stop_in(self.share_s / 2)


def _best_distinct(found: list[tuple[int, dict[int, int]]], top_k: int) -> list[dict[int, int]]:
    """The top_k distinct assignments by objective, best first (ties in a canonical order)."""
    unique: dict[tuple, tuple[int, dict[int, int]]] = {}
    for objective, assignment in found:
        key = tuple(sorted(assignment.items()))
        if key not in unique or objective < unique[key][0]:
            unique[key] = (objective, assignment)
    ranked = sorted(unique.items(), key=lambda item: (item[1][0], item[0]))
    return [assignment for _, (_, assignment) in ranked[:top_k]]


def plan_bound_us(pv: PlanVars, assignment: dict[int, int], seed: int, deadline: float | None = None,
                  base: cp_model.CpModel | None = None) -> int | None:
    """The CP-SAT objective of one plan: its identity variables fixed, the rest minimised (None when the
    model does not admit the plan). ``base``: the model to fix them in (default ``pv.model``, with the
    search's cuts so far)."""
    model = (base or pv.model).clone()
    for index, value in assignment.items():
        var = model.get_int_var_from_proto_index(index)
        model.Add(var == value)
    budget = 10.0 if deadline is None else min(10.0, max(0.05, deadline - time.perf_counter()))
    solver = _solver(seed, 1, budget)
    status = solver.Solve(model)
    if status == cp_model.MODEL_INVALID:
        raise RuntimeError(f"invalid CP-SAT model: {model.Validate()[:300]}")
    if status == cp_model.INFEASIBLE:
        return None
    return int(solver.ObjectiveValue()) if status == cp_model.OPTIMAL else int(solver.BestObjectiveBound())


POLISH_MIN_S = 0.5  # the local-search phase after a round lasts at least this long (if time is left)
# Before the first round, one climb from the best start plan gets at most this share of the time: the first
# round's presolve can take seconds on large models, and its incumbent cut and hint are better for it. The
# other start plans wait for later polishes (campus 405B, seed 2: the best start plan's climb reached 6.58 s in
# 2.7 s; climbing from the next three took 4.4 s more, found nothing and delayed the first round to 7.3 s).
FIRST_POLISH_SHARE = 0.25
ILS_PATIENCE = 8  # a polish phase ends after this many kicks in a row that did not improve the incumbent


class _Search:
    """The state of one hybrid search: the incumbent, every simulated plan, the statistics."""

    def __init__(self, pv: PlanVars, simulate: TimedEvaluate, deadline: float, seed: int,
                 threads: int, progress: Callable[[str], None] | None,
                 screen: TimedEvaluate | None = None):
        self.pv, self.simulate, self.deadline, self.seed, self.progress = pv, simulate, deadline, seed, progress
        self.screen = screen
        self.estimates: dict[str, float] = {}  # closed-form step of every screened plan (s)
        self.overshoot = ESTIMATE_OVERSHOOT
        self.threads = threads
        self.start = time.perf_counter()
        self.stats = SolveStats(status="exhausted")
        self.best: Candidate | None = None
        self.hint: dict[int, int] | None = None
        self.ratios: list[float] = []
        self.evaluated: dict[str, Candidate] = {}
        self.canonical: dict[str, tuple[Plan, dict[int, int] | None]] = {}  # plan JSON → ``_canonical``
        self.unpolished: list[Candidate] = []
        self.rng = random.Random(seed)
        self.uncut = pv.model.clone()  # before any no-good or incumbent cut: bounds of plans already cut off
        self.cutoff = pv.model.Add(pv.terms["step"] <= HORIZON_US).Index()
        self.crossing_cuts = CrossingCuts(pv)

    # --- bookkeeping ------------------------------------------------------------------------------
    def _canonical(self, plan: Plan) -> tuple[Plan, dict[int, int] | None]:
        """``plan`` with the settings the model pins when they cannot matter (``fix_irrelevant_choices``: the
        cross-building collective algorithm when no collective crosses, the gradient bucket under ZeRO-3 …)
        set as the model sets them, and its assignment (None: a plan outside the model, kept as it is).
        Local search proposes such twins (a campus search simulated 4–5 of each PP-across plan, one per
        cross-building algorithm, 5 of its 14 s of simulation); they are simulated once."""
        key = plan.model_dump_json()
        if key not in self.canonical:
            assignment = plan_assignment(self.pv, plan)
            same = plan
            if assignment is not None:
                modelled = plan_of(self.pv, assignment)
                same = plan.model_copy(update={"network": modelled.network,
                                               "dp_bucket_params": modelled.dp_bucket_params})
                if validate_plan(same, self.pv.instance):
                    same = plan
            self.canonical[key] = (same, assignment)
        return self.canonical[key]

    def evaluate(self, plan: Plan, assignment: dict[int, int] | None = None, bound_s: float = 0.0,
                 event: str = "") -> Candidate | None:
        """Simulate a valid plan once (later calls return the stored result), cut it off in the model and
        keep the best; ``event`` names it in a progress line (local-search plans report improvements).
        None: the plan could not be simulated before the deadline, which has not passed (not cut off).
        A plan that differs from a simulated one only in settings that cannot matter returns that one's result."""
        if assignment is None:  # a round's candidate comes with its assignment, already in the model's form
            plan, assignment = self._canonical(plan)
        key = plan.model_dump_json()
        if key in self.evaluated:
            return self.evaluated[key]
        t0 = time.perf_counter()
        try:  # the first plan is simulated to its end whatever it takes; the others only until the deadline
            report = self.simulate(self.pv.instance, plan, None if self.best is None else self.deadline)
        except SimulationDeadlineError:
            if time.perf_counter() >= self.deadline:
                raise
            self.stats.refused += 1
            return None
        finally:
            self.stats.simulate_wall_s += time.perf_counter() - t0
        self.stats.candidates_simulated += 1
        if assignment is not None:
            add_nogood(self.pv, assignment)
            self.crossing_cuts.learn(plan, assignment)  # local search's plans too
        candidate = self.evaluated[key] = Candidate(plan, bound_s, report)
        if key in self.estimates:
            self.overshoot = max(self.overshoot, self.estimates[key] / report.step_time_s - 1)
        if bound_s > 0:
            self.ratios.append(bound_s / report.step_time_s)
            self.stats.bound_error = max(self.stats.bound_error, self.ratios[-1] - 1)
        self.stats.history.append({"bound_s": bound_s, "simulated_s": report.step_time_s})
        improved = self.best is None or candidate.key() < self.best.key()
        faster = self.best is None or report.step_time_s < self.best.report.step_time_s
        if improved:
            self.best = candidate
            self.hint = assignment or self.hint
        if self.progress and (event or faster):  # a tie won by canonical order is not news
            what = event or f"local search: {plan.schedule} tp={plan.tp} cp={plan.cp} pp={plan.pp} dp={plan.dp}"
            self.progress(self._status_line(f"{what}: simulated {report.step_time_s:.4f} s"))
        return candidate

    def floor(self, plan: Plan) -> float:
        """A step time (s) ``plan`` cannot beat: its closed form less the largest overshoot (0 for a plan already
        simulated, or without a screen; inf when it cannot be screened before the deadline)."""
        plan = self._canonical(plan)[0]
        key = plan.model_dump_json()
        if self.screen is None or key in self.evaluated:
            return 0.0
        if key not in self.estimates:
            t0 = time.perf_counter()
            try:
                self.estimates[key] = self.screen(self.pv.instance, plan, self.deadline).step_time_s
            except SimulationDeadlineError:
                if time.perf_counter() >= self.deadline:
                    raise
                self.stats.refused += 1
                return math.inf
            finally:
                self.stats.screen_wall_s += time.perf_counter() - t0
            self.stats.screened += 1
        return self.estimates[key] / (1 + self.overshoot)

    def _status_line(self, event: str) -> str:
        """A progress line: elapsed seconds, the event, the best simulated step, the proven bound and gap."""
        line = f"[{time.perf_counter() - self.start:6.1f} s] {event}"
        if self.best is not None:
            line += f"; best {self.best.report.step_time_s:.4f} s"
            if self.stats.lower_bound_s > 0:
                gap = max(0.0, 1 - self.stats.lower_bound_s / self.best.report.step_time_s)
                line += f", bound {self.stats.lower_bound_s:.4f} s (gap {100 * gap:.1f} %)"
        return line

    def converged(self, why: str) -> None:
        """The incumbent is optimal: no unexamined plan's bound (corrected) beats it."""
        assert self.best is not None
        self.stats.status = "optimal" if self.stats.bound_error <= 0 else "within_bound_error"
        self.stats.lower_bound_s = self.best.report.step_time_s
        if self.progress:
            self.progress(self._status_line(f"round {self.stats.rounds}: {why}"))

    # --- the phases -------------------------------------------------------------------------------
    def start_plans(self, plans: list[Plan]) -> None:
        """Simulate the heuristic start plans, in the model's own form (its layer-split family and TP/GEMM
        overlap setting) when it has one."""
        for start_plan in plans:
            own_overlap = start_plan.model_copy(update={"tp_comm_overlap": self.pv.space.tp_comm_overlap})
            assignment = plan_assignment(self.pv, own_overlap)
            if assignment is None:
                continue
            plan = plan_of(self.pv, assignment)
            bound_us = plan_bound_us(self.pv, assignment, self.seed, self.deadline)
            if bound_us is None or validate_plan(plan, self.pv.instance):
                continue
            candidate = self.evaluate(plan, assignment, bound_us * US,
                                      f"start plan {plan.schedule} tp={plan.tp} pp={plan.pp}")
            if candidate is not None:
                self.unpolished.append(candidate)

    def polish(self, until: float, *, single_climb: bool = False) -> None:
        """Local search until ``until``: climb from each unpolished candidate, best first, then iterated
        local search (kick the incumbent, climb) until ``ILS_PATIENCE`` kicks in a row found nothing better
        (so a search that converges does the same work on any machine) or time is up. ``single_climb``: one
        climb, from the best unpolished candidate, then stop (the others stay unpolished)."""
        until = min(until, self.deadline)
        space = self.pv.space
        instance = self.pv.instance
        fruitless = 0
        while time.perf_counter() < until and fruitless < ILS_PATIENCE:
            if self.unpolished:
                self.unpolished.sort(key=Candidate.key)
                origin = self.unpolished.pop(0)
            else:
                if self.best is None or single_climb:
                    return
                kicked = kick(instance, space, self.best.plan, self.rng)
                if kicked is None:
                    return
                before = self.best
                origin = self.evaluate(kicked)
                if origin is not None:
                    climb(instance, space, origin, self.evaluate, until, self.floor)
                fruitless = fruitless + 1 if self.best is before else 0
                continue
            climb(instance, space, origin, self.evaluate, until, self.floor)
            if single_climb:
                return

    def set_cutoff(self) -> None:
        """The incumbent cut: step ≤ best simulated × (1 + bound error), in µs, less one."""
        if self.best is None:
            return
        correction = 1 + max(0.0, self.stats.bound_error)
        limit = max(0, math.ceil(self.best.report.step_time_s / US * correction) - 1)
        self.pv.model.Proto().constraints[self.cutoff].linear.domain[1] = min(limit, HORIZON_US)

    def rounds(self, top_k: int) -> None:
        """CP-SAT rounds, each followed by local search, until convergence or the deadline. Ctrl-C inside a
        CP-SAT solve is re-raised as KeyboardInterrupt."""
        pv, stats = self.pv, self.stats
        while True:
            remaining = self.deadline - time.perf_counter()
            if remaining <= 0:
                stats.status = "time_limit"
                return
            t0 = time.perf_counter()
            pv.model.ClearHints()
            for index, value in sorted((self.hint or {}).items()):
                pv.model.AddHint(pv.model.get_int_var_from_proto_index(index), value)
            self.set_cutoff()
            # A round gets a share of the time left, so a slow proof still leaves rounds for simulation; a
            # round with no solution at the end of its share goes on (up to its limit) until its first one.
            share = min(remaining, max(ROUND_MIN_S, remaining / ROUND_SHARE))
            limit = remaining
            if is_last_round(t0 - self.start, remaining, share):  # on to its proof, leaving a share to polish
                limit = share = remaining - share
            solver = _solver(self.seed, self.threads, limit)
            with _Improving(identity_vars(pv), solver, share) as recorder:
                status = solver.Solve(pv.model, recorder)
            # CP-SAT catches Ctrl-C and just ends the search; a round that stops early without a proof or
            # its own stop was interrupted, so the interrupt is passed on
            if (status in (cp_model.FEASIBLE, cp_model.UNKNOWN) and not recorder.stopped
                    and solver.WallTime() < limit - INTERRUPT_SLACK_S):
                raise KeyboardInterrupt
            stats.rounds += 1
            if status == cp_model.MODEL_INVALID:  # a bug in the model (e.g. a coefficient that overflows int64)
                raise RuntimeError(f"invalid CP-SAT model: {pv.model.Validate()[:300]}")
            if status == cp_model.INFEASIBLE:  # every plan left was examined or cut off by the incumbent
                stats.cpsat_wall_s += time.perf_counter() - t0
                if self.best is not None:
                    self.converged("no unexamined plan's bound beats the best plan (incumbent cut)")
                return
            if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                stats.cpsat_wall_s += time.perf_counter() - t0
                stats.status = "time_limit"
                return
            optimum_us = int(solver.ObjectiveValue())
            bound_s = (optimum_us if status == cp_model.OPTIMAL else solver.BestObjectiveBound()) * US
            correction = 1 + max(0.0, stats.bound_error)
            stats.lower_bound_s = max(stats.lower_bound_s, bound_s / correction)  # later rounds bound fewer plans
            if self.best is not None and bound_s / correction >= self.best.report.step_time_s * (1 - 1e-9):
                stats.cpsat_wall_s += time.perf_counter() - t0
                self.converged(f"bound {bound_s:.4f} s cannot beat the best plan")
                return
            cpsat_before = stats.cpsat_wall_s
            self._simulate_round(_best_distinct(recorder.found, top_k), t0)
            self.polish(time.perf_counter() + max(POLISH_MIN_S, stats.cpsat_wall_s - cpsat_before))

    def _simulate_round(self, found: list[dict[int, int]], t0: float) -> None:
        """Validate, bound and simulate a round's candidates (its CP-SAT time ends once their bounds are known)."""
        pv, stats = self.pv, self.stats
        # Several assignments can describe one plan (layer counts the split trims away); the plan's bound
        # is its canonical assignment's, and every assignment of an examined plan is cut off.
        plans = [plan_of(pv, assignment) for assignment in found]
        canonical = [plan_assignment(pv, plan) or assignment for plan, assignment in zip(plans, found, strict=True)]
        # past the deadline a plan's bound is not computed (0: unknown) and only a first plan is simulated
        bounds = [(plan_bound_us(pv, c, self.seed, self.deadline) or 0) * US
                  if time.perf_counter() < self.deadline else 0.0 for c in canonical]
        stats.cpsat_wall_s += time.perf_counter() - t0
        twinned: set[tuple] = set()  # degrees and schedule of the screened-out candidates whose twins were tried
        for assignment, same, plan, plan_bound in zip(found, canonical, plans, bounds, strict=True):
            if self.best is not None and time.perf_counter() > self.deadline:
                return
            if same != assignment:
                add_nogood(pv, assignment)
            if plan.model_dump_json() in self.evaluated:
                continue
            if validate_plan(plan, pv.instance):
                add_nogood(pv, same)
                stats.candidates_rejected += 1
                continue
            # the model proposed it: its family's crossings, if it has any, bound the next rounds
            self.crossing_cuts.learn(plan, same, siblings=True)
            if self.best is not None and self.floor(plan) > self.best.report.step_time_s:
                add_nogood(pv, same)  # its closed form shows it cannot beat the incumbent
                degrees = (plan.tp, plan.cp, plan.pp, plan.dp, plan.ep, plan.schedule, plan.virtual_stages,
                           plan.micro_batch_size)
                if degrees not in twinned:  # a round's candidates differ mostly in settings the twins share
                    twinned.add(degrees)
                    self._other_dimensions(plan)
                continue
            candidate = self.evaluate(plan, same, plan_bound, f"round {stats.rounds}: plan bound {plan_bound:.4f} s")
            if candidate is not None:
                self.unpolished.append(candidate)


    def _other_dimensions(self, plan: Plan) -> None:
        """A round's candidate the screen rejected: its twins in the other cross-building dimensions are screened,
        and simulated (then polished) where they could beat the incumbent. The model is loosest in what crosses
        buildings, so its candidate's degrees and shape can be right in the dimension it did not choose
        (cross-region: ZB-V tp2 cp4 pp16 dp64 across the 30 ms WAN, bounded at 0.92 s, screened at 1.72 s; its
        DP-across twin is the 1.07 s answer, which the rounds of some seeds never proposed)."""
        assert self.best is not None
        best: dict[CrossBuilding, tuple[float, Plan]] = {}  # per dimension, its twin of least floor
        for twin in other_dimensions(self.pv.instance, self.pv.space, plan):
            if time.perf_counter() >= self.deadline:
                return
            floor, dimension = self.floor(twin), twin.placement.cross_building
            if floor <= self.best.report.step_time_s and floor < best.get(dimension, (math.inf,))[0]:
                best[dimension] = floor, twin
        for dimension, (_, twin) in best.items():
            candidate = self.evaluate(twin, event=f"round {self.stats.rounds}: {dimension.value}-across twin")
            if candidate is not None:
                self.unpolished.append(candidate)


def refine(pv: PlanVars, simulate: TimedEvaluate, *, deadline: float, seed: int,
           top_k: int, start_plans: list[Plan] = (), threads: int = DEFAULT_THREADS,
           progress: Callable[[str], None] | None = None,
           screen: TimedEvaluate | None = None) -> tuple[Candidate | None, SolveStats]:
    """Run the hybrid search until ``deadline`` (a ``time.perf_counter()`` value); returns the best simulated
    candidate (None if no valid plan exists) and stats. ``simulate(instance, plan, deadline)`` (the deadline
    given once a plan is known) may raise ``SimulationDeadlineError``: before the deadline the plan is passed
    over (``SolveStats.refused``), past it the search ends.
    ``start_plans`` (heuristic plans) are simulated first, so the result is never worse than they are;
    each CP-SAT round runs ``threads`` workers. ``screen``: a faster model (called the same way) that
    overshoots ``simulate`` by at most ``ESTIMATE_OVERSHOOT`` (module docstring). Ctrl-C returns the best so
    far with status ``interrupted`` (re-raised if there is none)."""
    search = _Search(pv, simulate, deadline, seed, threads, progress, screen)
    stats = search.stats
    try:
        search.start_plans(list(start_plans))
        search.polish(time.perf_counter() + FIRST_POLISH_SHARE * (deadline - time.perf_counter()), single_climb=True)
        search.rounds(top_k)
    except SimulationDeadlineError:
        stats.status = "time_limit"
    except KeyboardInterrupt:
        if search.best is None:
            raise
        stats.status = "interrupted"
    best = search.best
    stats.wall_s = time.perf_counter() - search.start
    stats.bound_ratio_min = min(search.ratios) if search.ratios else 0.0
    stats.estimate_overshoot = search.overshoot if screen is not None else 0.0
    if best is not None:
        if best.bound_s == 0 and (assignment := plan_assignment(pv, best.plan)) is not None:
            # found by local search, so already cut off: bounded in the model as it was before the cuts
            best.bound_s = (plan_bound_us(pv, assignment, seed, deadline, search.uncut) or 0) * US
        if stats.status == "exhausted":
            stats.lower_bound_s = best.report.step_time_s
        stats.lower_bound_s = min(stats.lower_bound_s, best.report.step_time_s)  # the optimum is ≤ the best
        stats.gap = max(0.0, (best.report.step_time_s - stats.lower_bound_s) / best.report.step_time_s)
    return best, stats
