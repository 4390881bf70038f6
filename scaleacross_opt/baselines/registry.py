"""Registry of baselines keyed by name; importing ``scaleacross_opt.baselines`` fills it (one module each).

A *cheap* baseline is a deterministic plan generator ``(instance, space) -> list[Plan]`` (a few
plans, every one valid): ``run_baseline`` simulates them and keeps the fastest, and ``start_plans``
hands them to ``solve`` as its start plans. A *search* baseline is ``(instance, space, evaluator,
seed) -> reason | None``: it spends the evaluator's budget (simulator calls and/or wall seconds) and the
evaluator keeps the fastest plan it simulated; it returns a reason when it cannot run at all.
Every baseline works on the planner's space (``design_space`` then ``coefficients.prune_space``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..cost.report import StepReport
from ..errors import InfeasibleError
from ..optimizer.space import DesignSpace
from ..spec import Instance, Plan
from ..spec.bounds import check_time_limit
from ..validation.plan_checks import validate_plan
from .evaluator import Evaluator

PlanGenerator = Callable[[Instance, DesignSpace], list[Plan]]
Search = Callable[[Instance, DesignSpace, Evaluator, int], str | None]


@dataclass(frozen=True)
class Baseline:
    """One registered strategy: a plan generator (cheap) or a budgeted search."""

    name: str
    description: str
    plans: PlanGenerator | None = None
    search: Search | None = None

    @property
    def cheap(self) -> bool:
        """Deterministic, a few simulator calls, no budget: seeds ``solve``."""
        return self.plans is not None


@dataclass(frozen=True)
class BaselineResult:
    """What a baseline found: its fastest simulated plan (None: ``reason`` says why), the wall time and
    the simulator calls it used."""

    method: str
    plan: Plan | None
    report: StepReport | None
    wall_s: float
    simulator_calls: int
    reason: str | None = None


_BASELINES: dict[str, Baseline] = {}


def _add(baseline: Baseline) -> None:
    if baseline.name in _BASELINES:
        raise ValueError(f"baseline {baseline.name!r} registered twice")
    _BASELINES[baseline.name] = baseline


def register_plans(name: str, description: str) -> Callable[[PlanGenerator], PlanGenerator]:
    """Decorator: register a cheap baseline's plan generator under ``name``."""
    def wrap(plans: PlanGenerator) -> PlanGenerator:
        _add(Baseline(name, description, plans=plans))
        return plans

    return wrap


def register_search(name: str, description: str) -> Callable[[Search], Search]:
    """Decorator: register a budgeted search under ``name``."""
    def wrap(search: Search) -> Search:
        _add(Baseline(name, description, search=search))
        return search

    return wrap


def baseline_names() -> list[str]:
    """Registered names, cheap baselines first, each kind in alphabetical order."""
    return sorted(_BASELINES, key=lambda name: (not _BASELINES[name].cheap, name))


def get_baseline(name: str) -> Baseline:
    """The baseline called ``name``; KeyError lists the known names."""
    try:
        return _BASELINES[name]
    except KeyError:
        raise KeyError(f"unknown baseline {name!r}; known: {', '.join(baseline_names())}") from None


def planner_space(instance: Instance) -> DesignSpace:
    """The space the planner searches (dominated network settings pruned); InfeasibleError when a
    decision has no option or the model's state cannot fit the job's HBM."""
    from ..optimizer.coefficients import prune_space
    from ..optimizer.diagnose import memory_shortfall
    from ..optimizer.space import design_space

    shortfall = memory_shortfall(instance)
    if shortfall:
        raise InfeasibleError(shortfall)
    space = design_space(instance)
    reason = space.empty_reason(instance)
    if reason:
        raise InfeasibleError(reason)
    return prune_space(instance, space)


def start_plans(instance: Instance, space: DesignSpace) -> list[Plan]:
    """The plans of every cheap baseline (``solve`` simulates them first, so it never returns a plan
    slower than theirs), in registration order without duplicates."""
    seen: dict[str, Plan] = {}
    for name in baseline_names():
        generator = _BASELINES[name].plans
        for plan in generator(instance, space) if generator else []:
            seen.setdefault(plan.model_dump_json(), plan)
    return list(seen.values())


def run_baseline(name: str, instance: Instance, *, time_limit_s: float, seed: int = 0,
                 max_simulator_calls: int | None = None) -> BaselineResult:
    """Run baseline ``name``. A search stops at ``time_limit_s`` wall seconds or ``max_simulator_calls``
    simulations, whichever comes first (the same seed and a call budget reached first give the same
    plan); a cheap baseline simulates all of its few plans. Every returned plan passed ``validate_plan``."""
    check_time_limit(time_limit_s)
    baseline = get_baseline(name)
    start = time.perf_counter()
    evaluator = Evaluator(instance, deadline=None if baseline.cheap else start + time_limit_s,
                          max_calls=None if baseline.cheap else max_simulator_calls)
    try:
        space = planner_space(instance)
    except InfeasibleError as err:
        return BaselineResult(name, None, None, time.perf_counter() - start, 0, f"none fits: {err.reason}")
    if baseline.plans is not None:
        plans = baseline.plans(instance, space)
        for plan in plans:
            evaluator.evaluate(plan)
        reason = None if plans else ("none fits: no plan of this heuristic is valid here (memory, the search "
                                     "section or a single building)")
    else:
        assert baseline.search is not None
        reason = baseline.search(instance, space, evaluator, seed)
    wall = time.perf_counter() - start
    if evaluator.best is None:
        return BaselineResult(name, None, None, wall, evaluator.calls,
                              reason or "none fits: no valid plan met within the budget")
    plan, report = evaluator.best
    problems = validate_plan(plan, instance)
    assert not problems, f"baseline {name} produced an invalid plan: {problems}"
    return BaselineResult(name, plan, report, wall, evaluator.calls, reason)
