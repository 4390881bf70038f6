"""Simulation under a deadline: a plan that cannot finish in time is refused or stopped, and a search that
meets such a plan ends with its best plan so far (status time_limit)."""

from __future__ import annotations

import gc
import time
from pathlib import Path

import pytest

from scaleacross_opt.baselines.evaluator import Evaluator
from scaleacross_opt.errors import SimulationDeadlineError
from scaleacross_opt.io import load_instance
from scaleacross_opt.optimizer import solve
from scaleacross_opt.plan_defaults import fill_defaults
from scaleacross_opt.simulator import Paced, op_count, simulate
from scaleacross_opt.spec import Plan


def _plans(small: Path) -> tuple[object, list[Plan]]:
    instance = load_instance(small)
    shapes = [dict(tp=2, pp=1, dp=64, micro_batch_size=2, schedule="1f1b"),
              dict(tp=2, pp=4, dp=16, micro_batch_size=1, schedule="zb-h1"),
              dict(tp=1, pp=4, dp=32, virtual_stages=2, micro_batch_size=1, schedule="interleaved-1f1b")]
    return instance, [fill_defaults(instance, Plan(**shape)) for shape in shapes]


def test_op_count_is_what_the_simulator_times(small: Path) -> None:
    instance, plans = _plans(small)
    for plan in plans:
        assert op_count(instance, plan) == simulate(instance, plan).details["simulated_ops"], plan.schedule


def test_a_simulation_past_its_deadline_stops(small: Path) -> None:
    instance, plans = _plans(small)
    with pytest.raises(SimulationDeadlineError, match="still running"):
        simulate(instance, plans[1], deadline=time.perf_counter() - 1.0)
    assert simulate(instance, plans[1], deadline=time.perf_counter() + 600.0).step_time_s > 0


def test_paced_simulator_refuses_a_plan_it_cannot_finish_in_time(small: Path, monkeypatch) -> None:
    instance, plans = _plans(small)
    paced = Paced.simulator()
    with pytest.raises(SimulationDeadlineError, match="still running"):  # no pace known: tried, then stopped
        paced(instance, plans[0], time.perf_counter() - 1.0)
    assert paced(instance, plans[0]).step_time_s == simulate(instance, plans[0]).step_time_s
    assert 0 < paced.seconds_per_op < 1.0

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("a refused plan must not be simulated")

    monkeypatch.setattr("scaleacross_opt.simulator.simulate", never)
    with pytest.raises(SimulationDeadlineError, match="cannot be priced before the deadline"):
        paced(instance, plans[1], time.perf_counter() + 0.5 * paced.seconds_per_op * op_count(instance, plans[1]))


@pytest.mark.parametrize("enabled", [True, False])
def test_paced_prices_with_the_cycle_collector_off_and_restores_it(small: Path, enabled: bool) -> None:
    instance, plans = _plans(small)
    seen: list[bool] = []

    def model(inst: object, plan: Plan, deadline: float | None) -> object:
        seen.append(gc.isenabled())
        if len(seen) == 2:
            raise SimulationDeadlineError("stopped")
        return simulate(instance, plan)

    paced = Paced(model)
    (gc.enable if enabled else gc.disable)()
    try:
        paced(instance, plans[0])
        assert gc.isenabled() is enabled
        with pytest.raises(SimulationDeadlineError):
            paced(instance, plans[0])
        assert gc.isenabled() is enabled  # restored on the way out of an error too
    finally:
        gc.enable()
    assert seen == [False, False]


@pytest.mark.parametrize("late", [False, True])
def test_search_passes_over_a_refused_plan_and_ends_at_a_stopped_one(small: Path, late: bool) -> None:
    """After two plans every simulation fails: refused with time left (the search goes on, passing each
    over), or stopped at the deadline (the search ends there); either way the best plan so far is kept."""
    limit_s, calls = 3.0, []

    def deadline_after_two(instance, plan):
        calls.append(plan)
        if len(calls) <= 2:
            return simulate(instance, plan)
        if late:
            time.sleep(limit_s)
        raise SimulationDeadlineError("simulation still running at its deadline")

    result = solve(load_instance(small), time_limit_s=limit_s, evaluate=deadline_after_two)
    assert result.status == "time_limit" and result.plan in calls[:2]
    assert result.stats.candidates_simulated == 2
    if late:
        assert len(calls) == 3 and result.stats.refused == 0
    else:
        # every later call was refused with time left, but the last may have come past the deadline (stopped)
        assert len(calls) - 3 <= result.stats.refused <= len(calls) - 2 and result.stats.refused > 1


def test_baseline_evaluator_counts_a_late_simulation_as_the_budget_spent(small: Path) -> None:
    instance, plans = _plans(small)
    evaluator = Evaluator(instance, deadline=time.perf_counter() + 600.0, max_calls=None)
    assert evaluator.evaluate(plans[0]) is not None
    evaluator.deadline = time.perf_counter() + 1e-3  # passes while the next plan is being simulated
    assert evaluator.evaluate(plans[2]) is None
    assert evaluator.calls == 1 and evaluator.best is not None and evaluator.best[0] == plans[0]
