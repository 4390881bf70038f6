"""Reused simulations (``simulator.memo``): a plan whose workload was simulated before gets the same report
with its own memory figures, a plan with another workload is simulated, and a reuse teaches the paced
simulator no pace."""

from __future__ import annotations

from pathlib import Path

from scaleacross_opt.cost.memory import memory_per_gpu
from scaleacross_opt.cost.step import build_workload
from scaleacross_opt.io import load_instance
from scaleacross_opt.plan_defaults import fill_defaults
from scaleacross_opt.simulator import Paced, SimulationMemo, simulate
from scaleacross_opt.simulator.memo import workload_key
from scaleacross_opt.spec import Plan


def _plan(instance: object, **update: object) -> Plan:
    shape = dict(tp=1, pp=4, dp=32, virtual_stages=2, micro_batch_size=1, schedule="interleaved-1f1b")
    return fill_defaults(instance, Plan(**{**shape, **update}))


def test_a_twin_workload_reuses_the_report_and_another_is_simulated(small: Path) -> None:
    instance = load_instance(small)
    plan = _plan(instance)
    twin = plan.model_copy(update={"tp_comm_overlap": not plan.tp_comm_overlap})  # moot at tp = 1
    other = _plan(instance, zero_stage=3)
    memo = SimulationMemo()
    first = simulate(instance, plan, memo=memo)
    assert simulate(instance, twin, memo=memo) == simulate(instance, twin) == first
    assert memo.reused == 1
    assert simulate(instance, other, memo=memo) == simulate(instance, other) != first
    assert memo.reused == 1


def test_a_reused_report_carries_the_plans_own_memory(small: Path) -> None:
    instance = load_instance(small)
    plan, sharded = _plan(instance), _plan(instance, zero_stage=3)
    memo = SimulationMemo()
    report = simulate(instance, plan, memo=memo)
    key = workload_key(build_workload(instance, plan), 1.0)
    memo.put(key, report)
    own = memory_per_gpu(instance, sharded)
    reused = memo.get(key, own)
    assert own.total_gib < report.memory_gib_per_gpu
    assert (reused.memory_gib_per_gpu, reused.memory_capacity_gib, reused.fits_memory) == (
        own.total_gib, own.capacity_gib, own.fits)
    assert (reused.step_time_s, reused.breakdown, reused.details) == (report.step_time_s, report.breakdown,
                                                                      report.details)
    assert memo.get(workload_key(build_workload(instance, plan), 2.0), own) is None  # other report inputs


def test_a_reuse_teaches_the_paced_simulator_no_pace(small: Path) -> None:
    instance = load_instance(small)
    plan = _plan(instance)
    paced = Paced.simulator()
    paced(instance, plan)
    pace = paced.seconds_per_op
    paced.seconds_per_op = pace * 4  # as if the machine had been slower
    paced(instance, plan.model_copy(update={"tp_comm_overlap": not plan.tp_comm_overlap}))
    assert paced.reused == 1 and paced.seconds_per_op == pace * 4
