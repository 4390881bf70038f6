"""Human-readable summary of a solve result."""

from __future__ import annotations

from ..spec import CrossBuilding, Instance
from .result import SolveResult

_WHY = {
    CrossBuilding.NONE: "the job fits one building, so nothing crosses a building boundary",
    CrossBuilding.DP: "whole pipelines stay inside buildings; only gradient sync crosses, once per step",
    CrossBuilding.PP: "pipelines span buildings; only stage-boundary activations cross, per micro-batch",
    CrossBuilding.PP_DP: "pipelines span groups of buildings and the groups sync gradients",
}


def summary_text(instance: Instance, result: SolveResult) -> str:
    """Plan, step time, MFU, breakdown and why this placement."""
    plan, report, stats = result.plan, result.report, result.stats
    assert plan.placement is not None and plan.network is not None
    shares = ", ".join(f"{s.building}: {s.dp_replicas} replicas × {s.pp_stages} stages"
                       for s in plan.placement.buildings)
    net = plan.network
    lines = [
        f"instance        {instance.name or '(unnamed)'}: {instance.num_gpus:,} GPUs, "
        f"{len(instance.cluster.buildings)} building(s), {instance.job.model_spec.name}",
        f"plan            tp={plan.tp} cp={plan.cp} pp={plan.pp} dp={plan.dp} ep={plan.ep} "
        f"v={plan.virtual_stages} mbs={plan.micro_batch_size} recompute={plan.recompute.value} "
        f"ZeRO-{plan.zero_stage} schedule={plan.schedule}",
        f"placement       {plan.placement.cross_building.value} across buildings ({shares})",
        f"layers/stage    {plan.placement.layers_per_stage}",
        f"network         intra: {_net(net.intra_building)}",
        f"                cross: {_net(net.cross_building)}",
        f"step time       {report.step_time_s:.4f} s simulated, {result.estimate_step_time_s:.4f} s closed-form "
        f"estimate, {result.cpsat_bound_s:.4f} s CP-SAT bound",
        f"MFU             {report.mfu * 100:.1f} %   tokens/s {report.tokens_per_s:,.0f}   "
        f"memory {report.memory_gib_per_gpu:.1f} GiB/GPU",
        "breakdown       " + ", ".join(f"{k.removesuffix('_s')} {v:.3f}" for k, v in report.breakdown.items()),
        f"why             {_WHY[plan.placement.cross_building]}",
        f"search          {stats.status}: {stats.candidates_simulated} plans simulated in {stats.rounds} rounds, "
        f"{stats.wall_s:.1f} s; lower bound {stats.lower_bound_s:.4f} s, gap {stats.gap * 100:.2f} %",
    ]
    return "\n".join(lines)


def _net(config) -> str:  # noqa: ANN001
    return (f"{config.collective_algorithm.value}, {config.load_balancing.value}, "
            f"{config.congestion_control.value}, {config.loss_recovery.value}, "
            f"{config.qps_per_connection} QPs × {config.window_kib_per_qp} KiB")
