"""The Python API as a pipeline uses it: real signatures, plain string paths."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

import scaleacross_opt
from scaleacross_opt.io import load_instance
from scaleacross_opt.plan_defaults import fill_defaults
from scaleacross_opt.simulator import simulate
from scaleacross_opt.spec import Plan

INSTANCES = Path(__file__).resolve().parent.parent / "instances"


def test_solve_shows_its_real_signature() -> None:
    parameters = inspect.signature(scaleacross_opt.solve).parameters
    assert {"instance", "time_limit_s", "seed", "top_k"} <= set(parameters)
    assert scaleacross_opt.solve.__module__ == "scaleacross_opt.optimizer"


def test_simulate_writes_a_trace_to_a_string_path(tmp_path: Path) -> None:
    instance = load_instance(INSTANCES / "small-two-buildings-llama3-8b.yaml")
    plan = fill_defaults(instance, Plan(tp=8, pp=2, dp=8, micro_batch_size=1, schedule="1f1b"))
    target = tmp_path / "trace.json"
    report = simulate(instance, plan, trace_path=str(target))
    trace = json.loads(target.read_text())
    assert trace["traceEvents"]
    assert trace["metadata"]["step_time_s"] == report.step_time_s
    assert trace["metadata"]["plan"]["tp"] == 8 and trace["metadata"]["instance"] == instance.name


@pytest.mark.parametrize("limit", [float("inf"), float("nan"), 0.0, 2e6])
def test_a_time_limit_must_be_finite_and_bounded(run_cli, small: Path, limit: float) -> None:
    """An infinite limit broke solve's timers and its JSON (``wall_s: NaN``): the API and the CLI refuse it."""
    instance = load_instance(small)
    with pytest.raises(ValueError, match="time_limit_s"):
        scaleacross_opt.solve(instance, time_limit_s=limit)
    with pytest.raises(ValueError, match="time_limit_s"):
        scaleacross_opt.compare(instance, methods=["random"], time_limit_s=limit)
    assert run_cli(["solve", small, "--time-limit", str(limit)]).exit_code == 2
