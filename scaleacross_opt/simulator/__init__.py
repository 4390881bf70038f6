"""Discrete-event step simulator: ``simulate`` (instance + plan → StepReport) and ``simulate_workload``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..cost.report import StepReport
from ..cost.workload import LinkShare, StepWorkload
from .engine import SimResult, op_graph, simulate_workload
from .memo import SimulationMemo, workload_key
from .paced import Paced, op_count
from .trace import trace_events, write_trace

if TYPE_CHECKING:
    from ..spec.instance import Instance
    from ..spec.plan import Plan

__all__ = ["Paced", "SimResult", "SimulationMemo", "op_count", "op_graph", "report_from_result", "simulate",
           "simulate_workload", "trace_events", "write_trace"]


def _without_p2p(workload: StepWorkload) -> StepWorkload:
    """The same workload with free point-to-point transfers (to separate bubble from exposed PP)."""
    links = {key: LinkShare(link.src_building, link.dst_building, float("inf"), 0.0)
             for key, link in workload.links.items()}
    return replace(workload, links=links, p2p_bytes=0.0)


def report_from_result(
    result: SimResult, workload: StepWorkload, *, model_flops: float, peak_flops: float, tokens: float,
    memory_gib: float, capacity_gib: float, fits: bool, deadline: float | None = None,
) -> StepReport:
    """StepReport of a simulated step.

    Breakdown (sums to the step time): the busiest stage's compute minus the TP/CP/EP exposure
    already inside its op durations; bubble = makespan with free p2p − that busy time; exposed PP =
    makespan − makespan with free p2p, both with the classes timed apart; exposed DP = optimizer start −
    makespan + the ZeRO-1/2 gathers the next forward waits for; what sharing resources adds to the
    makespan goes to the first class of ZeRO-3 gathers, EP all-to-all and CP ring that runs inside the ops
    (they slow each other and are slowed by the syncs), else to PP (the syncs slow the transfers); the
    busiest shared resource's excess over the timeline goes to DP (gradients cross buildings) or PP.
    MFU = model FLOPs ÷ (Σ peak FLOP/s × step time). ``deadline``: as ``simulate``'s.
    """
    makespan = result.apart_pipeline_end_s
    free = simulate_workload(_without_p2p(workload), share=False, deadline=deadline).pipeline_end_s
    busy = max(float(g.busy_s.max()) for g in result.groups)
    comm = {k: float(workload.exposed_comm_s.get(k, 0.0)) for k in ("tp", "cp", "ep", "dp")}
    breakdown = {
        "compute_s": busy - sum(comm.values()),  # 'dp': ZeRO-3 gathers inside the op durations
        "bubble_s": free - busy,
        "exposed_tp_s": comm["tp"],
        "exposed_cp_s": comm["cp"],
        "exposed_ep_s": comm["ep"],
        "exposed_pp_s": makespan - free,
        "exposed_dp_s": result.exposed_dp_s + result.exposed_gather_s + comm["dp"],
        "optimizer_s": result.optimizer_end_s - result.optimizer_start_s,
    }
    breakdown[workload.sharing_key] += result.sharing_s
    breakdown[workload.resource_excess_key] += result.resource_excess_s
    step = result.step_time_s
    details: dict[str, object] = {
        "pipeline_makespan_s": result.pipeline_end_s,
        "resource_sharing_s": result.sharing_s,
        "per_stage": [
            {"group": g.name, "stage": s, "busy_s": float(g.busy_s[s]), "idle_s": g.makespan_s - float(g.busy_s[s]),
             "peak_in_flight_microbatches": float(result.graph.peak_in_flight[s])}
            for g in result.groups for s in range(result.graph.pp)
        ],
        "exposed_comm_s": {"pp": breakdown["exposed_pp_s"], "dp": breakdown["exposed_dp_s"], **comm},
        "dp_sync_total_s": float(np.sum(workload.dp_sync_s)),
        "dp_gather_total_s": float(np.sum(workload.dp_gather_s)),
        "dp_buckets_per_chunk": workload.dp_buckets.tolist(),  # [stage][chunk]: gradient buckets synced
        "resource_busy_s": dict(sorted(workload.resource_busy_s.items(), key=lambda kv: -kv[1])[:5]),
        "link_contention": {g.name: g.contended for g in result.groups},
        "simulated_ops": result.num_ops,
    }
    return StepReport(
        step_time_s=step, mfu=model_flops / (peak_flops * step), tokens_per_s=tokens / step,
        memory_gib_per_gpu=memory_gib, memory_capacity_gib=capacity_gib, fits_memory=fits, breakdown=breakdown,
        simulated=True, details=details,
    )


def simulate(instance: Instance, plan: Plan, trace_path: Path | str | None = None,
             deadline: float | None = None, memo: SimulationMemo | None = None) -> StepReport:
    """Simulate one step of ``plan`` on ``instance``; optionally write a Chrome/Perfetto trace.
    ``deadline`` (a ``time.perf_counter()`` value): raise ``errors.SimulationDeadlineError`` if the
    simulation is still running when it passes. ``memo``: reuse the report of a plan with the same
    workload simulated before (``simulator.memo``; not when writing a trace).

    The plan's defaults are filled in first; the workload, memory and peak FLOP/s come from the
    cost model, so estimate and simulation differ only in how they compose the ops.
    """
    from ..cost.compute import model_flops_per_step
    from ..cost.memory import memory_per_gpu
    from ..cost.step import build_workload, peak_flops
    from ..plan_defaults import fill_defaults

    plan = fill_defaults(instance, plan)
    workload = build_workload(instance, plan)
    job = instance.job
    memory = memory_per_gpu(instance, plan)
    inputs = (model_flops_per_step(job.model_spec, job.seq_len, job.global_batch_size), peak_flops(instance, plan),
              float(job.tokens_per_step))
    key = workload_key(workload, *inputs) if memo is not None and trace_path is None else None
    if key is not None and (known := memo.get(key, memory)) is not None:
        return known
    result = simulate_workload(workload, deadline=deadline)
    report = report_from_result(
        result, workload, model_flops=inputs[0], peak_flops=inputs[1], tokens=inputs[2],
        memory_gib=memory.total_gib, capacity_gib=memory.capacity_gib, fits=memory.fits, deadline=deadline,
    )
    if key is not None:
        memo.put(key, report)
    if trace_path is not None:
        metadata = {"instance": instance.name, "gpus": plan.num_gpus, "step_time_s": report.step_time_s,
                    "mfu": report.mfu, "plan": plan.model_dump(mode="json")}
        write_trace(Path(trace_path), result, workload, metadata)
    return report
