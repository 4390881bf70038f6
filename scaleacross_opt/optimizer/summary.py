"""Human-readable summary of a solve result."""

from __future__ import annotations

from ..cost.step import dp_bucket_params, sizes_dp_buckets
from ..spec import CrossBuilding, Instance, Plan, TrafficClassConfig
from .result import SolveResult

_WHY = {
    CrossBuilding.NONE: "the job fits one building, so nothing crosses a building boundary",
    CrossBuilding.DP: "whole pipelines stay inside buildings; only gradient sync crosses, once per step",
    CrossBuilding.PP: "pipelines span buildings; only stage-boundary activations cross, per micro-batch",
    CrossBuilding.PP_DP: "pipelines span groups of buildings and the groups sync gradients",
}


def plan_decisions(plan: Plan) -> str:
    """Degrees, schedule, ZeRO stage, DP sync (its gradient bucket where bucketed) and TP overlap, one line."""
    bucket = (f" bucket={dp_bucket_params(plan) / 1e6:,.0f}M params"
              + (" (default)" if plan.dp_bucket_params is None else "")) if sizes_dp_buckets(plan) else ""
    return (f"tp={plan.tp} cp={plan.cp} pp={plan.pp} dp={plan.dp} ep={plan.ep} v={plan.virtual_stages} "
            f"mbs={plan.micro_batch_size} recompute={plan.recompute.value} ZeRO-{plan.zero_stage} "
            f"schedule={plan.schedule} dp_sync={plan.dp_sync.value}{bucket}"
            + (f" tp_comm_overlap={str(plan.tp_comm_overlap).lower()}" if plan.tp > 1 else ""))


def summary_text(instance: Instance, result: SolveResult) -> str:
    """Plan, step time, MFU, breakdown and why this placement."""
    plan, report, stats = result.plan, result.report, result.stats
    assert plan.placement is not None and plan.network is not None
    grouped = plan.placement.cross_building is CrossBuilding.PP_DP
    shares = ", ".join(f"{s.building}: {_count(s.dp_replicas, 'replica')} × {_count(s.pp_stages, 'stage')}"
                       + (f" (group {s.group})" if grouped else "") for s in plan.placement.buildings)
    where = ("in one building" if plan.placement.cross_building is CrossBuilding.NONE
             else f"{plan.placement.cross_building.value} across buildings")
    net = plan.network
    lines = [
        f"instance        {instance.name or '(unnamed)'}: {instance.num_gpus:,} GPUs, "
        f"{len(instance.cluster.buildings)} building(s), {instance.job.model_spec.name}",
        f"plan            {plan_decisions(plan)}",
        f"placement       {where} ({shares})",
        f"GPUs used       {_gpus_used(plan, instance)}",
        *([f"busiest        {busiest}"] if (busiest := _busiest(report.details)) else []),
        f"layers/stage    {plan.placement.layers_per_stage}",
        f"network         intra-building: {_net(net.intra_building)}",
        *([f"                cross-building: {_net(net.cross_building)}"]
          if plan.placement.cross_building is not CrossBuilding.NONE else []),
        f"step time       {report.step_time_s:.4f} s simulated, {result.estimate_step_time_s:.4f} s closed-form "
        "estimate, " + (f"{result.cpsat_bound_s:.4f} s CP-SAT bound of this plan" if result.cpsat_bound_s > 0
                        else "its CP-SAT bound not computed in time"),
        f"MFU             {report.mfu * 100:.1f} %   tokens/s {report.tokens_per_s:,.0f}   "
        f"memory {report.memory_text} per GPU",
        "breakdown (s)   " + ", ".join(f"{k.removesuffix('_s')} {v:.3f}" for k, v in report.breakdown.items()),
        f"why             {_WHY[plan.placement.cross_building]}",
        f"search          {_STATUS[stats.status]}: {_count(stats.candidates_simulated, 'plan')} simulated "
        f"({stats.simulations_reused} of them twins of a simulated workload) in "
        f"{_count(stats.rounds, 'round')}, {stats.wall_s:.1f} s (CP-SAT {stats.cpsat_wall_s:.1f} s, simulation "
        f"{stats.simulate_wall_s:.1f} s, screening {_count(stats.screened, 'plan')} {stats.screen_wall_s:.1f} s); "
        + (f"proven: no plan beats {stats.lower_bound_s:.4f} s (gap {stats.gap * 100:.2f} %)" if stats.lower_bound_s > 0
           else "no bound proven yet"),
    ]
    return "\n".join(lines)


_STATUS = {
    "optimal": "optimal for the simulator",
    "within_bound_error": "optimal up to the bound's measured error",
    "time_limit": "time limit reached",
    "exhausted": "every plan examined",
    "interrupted": "interrupted (Ctrl-C): the best plan found so far",
}


def _gpus_used(plan: Plan, instance: Instance) -> str:
    """GPUs the plan occupies in each building, of those the building has."""
    assert plan.placement is not None
    used: dict[str, int] = {}
    for share in plan.placement.buildings:
        used[share.building] = used.get(share.building, 0) + share.dp_replicas * share.pp_stages * plan.tp * plan.cp
    return ", ".join(f"{b.name} {used.get(b.name, 0):,} of {b.num_gpus:,}" for b in instance.cluster.buildings)


def _busiest(details: dict) -> str:
    """The shared resource (a building's links or a GPU's NIC) with the most traffic per step, and its busy time."""
    busy = details.get("resource_busy_s") or {}
    if not busy:
        return ""
    name, seconds = max(busy.items(), key=lambda item: item[1])
    return f"{name}: {seconds:.3f} s of traffic per step (all classes at full capacity)"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _net(config: TrafficClassConfig) -> str:
    return (f"{config.collective_algorithm.value}, {config.load_balancing.value}, "
            f"{config.congestion_control.value}, {config.loss_recovery.value}, "
            f"{_count(config.qps_per_connection, 'QP')} × {config.window_kib_per_qp} KiB window")
