"""The production heuristic (DESIGN §5): TP = the NVLink domain, the smallest PP that fits memory (with
the largest EP for MoE models),
DP across buildings, interleaved 1F1B where it runs (else 1F1B), micro-batch 1, the least
recompute that fits, default network settings (the first allowed option of each).

``production_plans`` returns those plans for every schedule of the space at that PP, so the
optimizer can start from them (its answer is then never worse than the heuristic).
"""

from __future__ import annotations

from ..optimizer.space import DesignSpace
from ..plan_defaults import fill_defaults
from ..schedules import get_schedule
from ..spec import CrossBuilding, Instance, NetworkConfig, Plan
from ..validation.plan_checks import validate_plan

PREFERRED_SCHEDULES = ("interleaved-1f1b", "1f1b")


def production_plans(instance: Instance, space: DesignSpace) -> list[Plan]:
    """Valid heuristic plans at the smallest PP that fits (empty if none fits)."""
    n, gbs = instance.num_gpus, instance.job.global_batch_size
    tp, cp, mbs = max(space.tp), min(space.cp), min(space.micro_batch_sizes)
    intra = space.intra_network[0]
    network = NetworkConfig(intra_building=intra, cross_building=space.cross_network[0] if space.cross_network
                            else intra)
    rank = {name: i for i, name in enumerate(PREFERRED_SCHEDULES)}
    schedules = sorted(space.schedules, key=lambda s: (rank.get(s, len(rank)), s))
    for pp, ep in ((pp, ep) for pp in sorted(space.pp) for ep in sorted(space.ep, reverse=True)):
        if n % (tp * cp * pp) or gbs % (n // (tp * cp * pp) * mbs):
            continue
        dp = n // (tp * cp * pp)
        m = gbs // (dp * mbs)
        for recompute in space.recompute:
            found = []
            for name in schedules if pp > 1 else schedules[:1]:
                v = next((v for v in sorted(space.virtual_stages, reverse=True) if get_schedule(name).check(pp, v, m)
                          is None and pp * v <= instance.job.model_spec.layers), None)
                if v is None:
                    continue
                plan = Plan(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, virtual_stages=min(v, 2), micro_batch_size=mbs,
                            schedule=name, recompute=recompute, zero_stage=min(space.zero_stages), network=network)
                if get_schedule(name).check(pp, plan.virtual_stages, m) is not None:
                    continue
                try:
                    plan = fill_defaults(instance, plan)
                except ValueError:
                    continue
                assert plan.placement is not None
                if plan.placement.cross_building not in space.cross_building and not (
                        plan.placement.cross_building is CrossBuilding.NONE and len(instance.cluster.buildings) == 1):
                    continue
                if not validate_plan(plan, instance):
                    found.append(plan)
            if found:
                return found
    return []
