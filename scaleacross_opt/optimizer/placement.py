"""From per-building counts (replicas d_b, stages s_b, max layers per stage ℓ_b) to a ``Placement``.

The CP-SAT model decides the counts; this module turns them into the explicit placement of the plan
file, and the exhaustive enumerator uses the same function so both describe plans identically.
"""

from __future__ import annotations

from ..spec import BuildingShare, CrossBuilding, Placement


def materialize_layers(stages: list[int], max_layers: list[int], total_layers: int, virtual_stages: int,
                       head_layers: int, head_stage: int) -> list[int]:
    """Layers per stage: building b's stages hold ``max_layers[b]`` each except ``head_stage``, which holds
    ``head_layers`` (it also carries the LM head); the excess over the model's layers is removed one
    layer at a time from the other stages, first stage first (it carries the embedding), never below
    ``virtual_stages`` per stage.
    """
    layers = [ell for s, ell in zip(stages, max_layers, strict=True) for _ in range(s)]
    layers[head_stage] = head_layers
    excess = sum(layers) - total_layers
    if excess < 0:
        raise ValueError(f"{sum(layers)} layer slots cannot hold {total_layers} layers")
    while excess > 0:
        progressed = False
        for i in (i for i in range(len(layers)) if i != head_stage):
            if excess and layers[i] > virtual_stages:
                layers[i] -= 1
                excess -= 1
                progressed = True
        if not progressed:
            raise ValueError("cannot remove excess layers without emptying a chunk")
    return layers


def build_placement(mode: CrossBuilding, names: list[str], replicas: list[int], stages: list[int],
                    max_layers: list[int], head_layers: int, head_stage: int, total_layers: int,
                    virtual_stages: int, groups: list[int] | None = None) -> Placement:
    """The placement for per-building counts (buildings with no share are left out).

    ``mode`` dp/none: every used building holds whole pipelines (``stages[b]`` = pp) and one layer
    split applies to all; pp: every used building holds ``stages[b]`` stages of all replicas, in
    cluster order; pp+dp: building b is in pipeline group ``groups[b]`` and holds ``stages[b]`` stages
    of that group's replicas, the group's buildings chained in cluster order, with one layer split for
    all. ``head_stage`` (the schedule's LM-head stage) holds ``head_layers``.
    """
    used = [b for b in range(len(names)) if replicas[b] > 0 and stages[b] > 0]
    shares = [BuildingShare(building=names[b], dp_replicas=replicas[b], pp_stages=stages[b],
                            group=groups[b] if mode is CrossBuilding.PP_DP and groups else 0) for b in used]
    if mode is CrossBuilding.PP:
        layers = materialize_layers([stages[b] for b in used], [max_layers[b] for b in used], total_layers,
                                    virtual_stages, head_layers, head_stage)
    else:
        pp = stages[used[0]]  # whole pipelines per building; under pp+dp, the first group's stages added up
        if mode is CrossBuilding.PP_DP:
            pp = sum(stages[b] for b in used if groups[b] == groups[used[0]])
        layers = materialize_layers([pp], [max(max_layers[b] for b in used)], total_layers, virtual_stages,
                                    head_layers, head_stage)
    return Placement(cross_building=mode, buildings=shares, layers_per_stage=layers)
