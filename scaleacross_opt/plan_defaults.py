"""Defaults for the optional parts of a hand-written plan: network settings and placement.

Default placement: everything in one building when it fits; otherwise whole replicas per building
(DP across buildings) filled greedily in the cluster's order; otherwise pipeline stages split across
buildings (PP across) in proportion to their GPU counts. Layers are split evenly, the remainder going
to the middle stages (the first and last stages also carry the embedding and LM head).
"""

from __future__ import annotations

from .catalog.network import DEFAULT_NETWORK
from .spec import BuildingShare, CrossBuilding, Instance, Placement, Plan


def even_layers(layers: int, pp: int) -> list[int]:
    """Split ``layers`` over ``pp`` stages as evenly as possible, extras to the middle stages."""
    base, extra = divmod(layers, pp)
    split = [base] * pp
    order = [*list(range(1, pp - 1)), pp - 1, 0] if pp > 2 else list(range(pp))
    for stage in order[:extra]:
        split[stage] += 1
    return split


def dp_across_placement(instance: Instance, plan: Plan) -> Placement | None:
    """Whole replicas per building, filled greedily in cluster order (EP groups kept whole), with an
    even layer split; None when they do not all fit."""
    replica_gpus = plan.tp * plan.cp * plan.pp
    ep_unit = max(1, plan.ep // plan.cp) if plan.ep % plan.cp == 0 else plan.ep
    shares: list[BuildingShare] = []
    left = plan.dp
    for building in instance.cluster.buildings:
        fit = min(left, building.num_gpus // replica_gpus)
        fit -= fit % ep_unit
        if fit > 0:
            shares.append(BuildingShare(building=building.name, dp_replicas=fit, pp_stages=plan.pp))
            left -= fit
    if left:
        return None
    layers = even_layers(instance.job.model_spec.layers, plan.pp)
    return Placement(cross_building=CrossBuilding.DP, buildings=shares, layers_per_stage=layers)


def default_placement(instance: Instance, plan: Plan) -> Placement:
    """A simple valid placement, or ValueError saying why none of the simple ones fits."""
    replica_gpus = plan.tp * plan.cp * plan.pp
    buildings = instance.cluster.buildings
    layers = even_layers(instance.job.model_spec.layers, plan.pp)
    for building in buildings:
        if building.num_gpus >= plan.num_gpus:
            share = BuildingShare(building=building.name, dp_replicas=plan.dp, pp_stages=plan.pp)
            return Placement(cross_building=CrossBuilding.NONE, buildings=[share], layers_per_stage=layers)
    dp_across = dp_across_placement(instance, plan)
    if dp_across is not None:
        return dp_across
    stage_gpus = plan.tp * plan.cp * plan.dp
    capacity = [b.num_gpus // stage_gpus for b in buildings]
    if sum(capacity) >= plan.pp:
        total = sum(b.num_gpus for b in buildings)
        stages = [min(cap, round(plan.pp * b.num_gpus / total)) for cap, b in zip(capacity, buildings, strict=True)]
        for i in sorted(range(len(buildings)), key=lambda j: -capacity[j] + stages[j]):
            while sum(stages) < plan.pp and stages[i] < capacity[i]:
                stages[i] += 1
        while sum(stages) > plan.pp:
            i = max(range(len(stages)), key=lambda j: stages[j])
            stages[i] -= 1
        shares = [BuildingShare(building=b.name, dp_replicas=plan.dp, pp_stages=s)
                  for b, s in zip(buildings, stages, strict=True) if s > 0]
        if len(shares) > 1:
            return Placement(cross_building=CrossBuilding.PP, buildings=shares, layers_per_stage=layers)
    raise ValueError(f"no default placement fits: a replica needs {replica_gpus} GPUs and a stage of all "
                     f"replicas {stage_gpus}; write placement explicitly")


def fill_defaults(instance: Instance, plan: Plan) -> Plan:
    """The plan with ``network``, ``placement`` and a placement's ``layers_per_stage`` (the even split)
    filled in where they were omitted."""
    updates: dict[str, object] = {}
    if plan.network is None:
        updates["network"] = DEFAULT_NETWORK
    if plan.placement is None:
        updates["placement"] = default_placement(instance, plan)
    elif plan.placement.layers_per_stage is None:
        layers = even_layers(instance.job.model_spec.layers, plan.pp)
        updates["placement"] = plan.placement.model_copy(update={"layers_per_stage": layers})
    return plan.model_copy(update=updates) if updates else plan
