"""Every shipped instance can be estimated and simulated with a hand-written plan (placement and
network omitted, so the defaults are filled in)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaleacross_opt.baselines.production import production_plans
from scaleacross_opt.cost.report import BREAKDOWN_KEYS
from scaleacross_opt.cost.step import estimate
from scaleacross_opt.io import load_instance
from scaleacross_opt.optimizer.space import design_space
from scaleacross_opt.plan_defaults import fill_defaults
from scaleacross_opt.simulator import simulate

INSTANCES = sorted((Path(__file__).resolve().parent.parent / "instances").glob("*.yaml"))


@pytest.mark.parametrize("path", [p for p in INSTANCES if not p.stem.startswith("infeasible")], ids=lambda p: p.stem)
def test_hand_written_plan_is_estimated_and_simulated(path: Path) -> None:
    instance = load_instance(path)
    heuristic = production_plans(instance, design_space(instance))
    assert heuristic, "the production heuristic finds a plan that fits"
    plan = fill_defaults(instance, heuristic[0].model_copy(update={"placement": None, "network": None}))
    estimated, simulated = estimate(instance, plan), simulate(instance, plan)
    for report in (estimated, simulated):
        assert tuple(report.breakdown) == BREAKDOWN_KEYS
        assert report.step_time_s > 0 and 0 < report.mfu < 1 and report.fits_memory
    assert sum(simulated.breakdown.values()) == pytest.approx(simulated.step_time_s)
    floor = estimated.details["lower_bound_s"]  # model FLOPs ÷ Σ peak: no plan can be faster
    assert estimated.step_time_s > floor and simulated.step_time_s > floor


def test_infeasible_instance_has_no_heuristic_plan() -> None:
    instance = load_instance(next(p for p in INSTANCES if p.stem.startswith("infeasible")))
    assert production_plans(instance, design_space(instance)) == []
