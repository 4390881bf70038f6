"""The optimizer: design space → CP-SAT model → simulator-in-the-loop refinement.

``solve(instance, time_limit_s, seed, top_k)`` returns a ``SolveResult`` whose plan passed the
independent validator (``validation.plan_checks.validate_plan``) and was simulated.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..cost.report import StepReport
from ..errors import InfeasibleError, NoPlanInTimeError
from ..simulator.paced import Paced
from ..spec import Instance, Plan
from ..spec.bounds import check_time_limit
from ..validation.plan_checks import validate_plan
from .coefficients import build_coefficients, prune_space
from .cpsat.build import build_model
from .diagnose import infeasibility_reason, memory_shortfall
from .refine import DEFAULT_THREADS, refine
from .result import SolveResult, SolveStats
from .space import design_space

__all__ = ["SolveResult", "SolveStats", "solve"]


def _simulate(instance: Instance, plan: Plan) -> StepReport:
    from ..simulator import simulate

    return simulate(instance, plan)


# Share of the time limit kept for finishing after refinement (a CP-SAT round overruns its limit by up to
# ~1 s on 1M-GPU models; the closing simulations and estimate take under a second): solve returns in time.
FINISH_RESERVE_FRACTION = 0.04
FINISH_RESERVE_MAX_S = 3.0


def solve(instance: Instance, *, time_limit_s: float = 60.0, seed: int = 0, top_k: int = 8,
          threads: int = DEFAULT_THREADS, progress: Callable[[str], None] | None = None,
          evaluate: Callable[[Instance, Plan], StepReport] = _simulate) -> SolveResult:
    """Find the plan with the shortest step for ``instance``.

    ``evaluate`` gives the step time the search optimises (default: the discrete-event simulator, with the
    closed-form ``cost.step.estimate`` screening out plans that cannot win; the closed form alone is a
    faster, coarser alternative). ``threads``: CP-SAT workers per
    round (a parallel portfolio; give it the CPUs the solve may use). Same instance and seed give
    the same plan unless the time limit cuts the search short. Raises ``InfeasibleError`` with the
    reason when no plan fits (proven), ``NoPlanInTimeError`` when the time limit ends the search before
    any plan is found. Ctrl-C returns the best plan so far (status ``interrupted``), if there is one.
    """
    from ..baselines import start_plans as cheap_baseline_plans
    from ..cost.step import estimate

    check_time_limit(time_limit_s)
    deadline = time.perf_counter() + time_limit_s
    shortfall = memory_shortfall(instance)
    if shortfall:
        raise InfeasibleError(shortfall)
    space = design_space(instance)
    reason = space.empty_reason(instance)
    if reason:
        raise InfeasibleError(reason)
    space = prune_space(instance, space)
    coefficients = build_coefficients(instance, space)
    pv = build_model(instance, space, coefficients)
    if progress:
        proto = pv.model.Proto()
        progress(f"search space: {space.size():,} combinations of degrees, schedule, v, ZeRO stage, cross-building "
                 f"dimension, network and gradient bucket size (before per-building placements and layer splits); "
                 f"CP-SAT model: "
                 f"{len(proto.variables)} variables, {len(proto.constraints)} constraints; {len(space.shapes)} "
                 f"shard shapes, {len(space.intra_network)} intra / {len(space.cross_network)} cross network "
                 "options after dominance pruning")
    start_plans = cheap_baseline_plans(instance, space)
    # refinement stops early enough for its last simulations, the validator and the final estimate
    reserve_s = min(FINISH_RESERVE_MAX_S, FINISH_RESERVE_FRACTION * time_limit_s)
    # the simulator and its screen refuse (or stop) a plan they could not finish before the deadline; another
    # ``evaluate`` runs to the end
    default = evaluate is _simulate
    timed = Paced.simulator() if default else lambda inst, plan, _until: evaluate(inst, plan)
    best, stats = refine(pv, timed, deadline=deadline - reserve_s, seed=seed, top_k=top_k,
                         start_plans=start_plans, threads=threads, progress=progress,
                         screen=Paced.closed_form() if default else None)
    stats.simulations_reused = timed.reused if default else 0
    if best is None or best.report is None:
        if stats.status == "time_limit":
            raise NoPlanInTimeError(f"no plan found within the time limit of {time_limit_s:g} s (not proven "
                                    "infeasible: raise --time-limit)")
        raise InfeasibleError(infeasibility_reason(instance, space))
    problems = validate_plan(best.plan, instance)
    assert not problems, f"validator rejected the returned plan: {problems}"
    stats.wall_s = time.perf_counter() - deadline + time_limit_s
    return SolveResult(plan=best.plan, report=best.report,
                       estimate_step_time_s=estimate(instance, best.plan).step_time_s,
                       cpsat_bound_s=best.bound_s, stats=stats)
