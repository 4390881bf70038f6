"""``crossdc-sota``: the cross-data-center state of the art (CrossPipe, Chen et al. ATC'25; Atlas,
Dahal et al. 2024): pipeline stages across buildings in proportion to their GPUs, data parallelism
inside each building, default network settings, sized like ``production`` (TP = NVLink domain, the
smallest PP ≥ the number of buildings that fits memory; the smallest CP whose micro-batch count some
cross-DC schedule accepts — with few sequences per replica, as on 102,400 GPUs, CP 1 leaves fewer
micro-batches than stages), with each cross-DC schedule the project has
— CrossPipe's window schedule and the V-shaped DualPipe and ZB-V, whose LM-head stage stays in the
first building — at the smallest virtual-stage count it accepts. The baseline reports the fastest.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..optimizer.neighbourhood import place
from ..optimizer.space import DesignSpace
from ..schedules import get_schedule
from ..spec import CrossBuilding, Instance, Plan
from .heuristic import Sizing, smallest_fitting
from .registry import register_plans

CROSS_DC_SCHEDULES = ("crosspipe-unidirectional", "dualpipe", "zb-v")


@register_plans("crossdc-sota", "CrossPipe/Atlas-style: PP across buildings (stages ∝ GPUs), DP inside, "
                                "best cross-DC schedule (CrossPipe, DualPipe, ZB-V), default network")
def crossdc_plans(instance: Instance, space: DesignSpace) -> list[Plan]:
    """Valid PP-across plans with each cross-DC schedule at the smallest PP that fits (empty if none
    fits, or the instance has one building, or its search excludes PP across)."""
    if CrossBuilding.PP not in space.cross_building:
        return []
    layers = instance.job.model_spec.layers

    def build(sizing: Sizing) -> Iterator[Plan | None]:
        pp, m = sizing.pp, sizing.num_microbatches
        for name in (s for s in CROSS_DC_SCHEDULES if s in space.schedules):
            v = next((v for v in sorted(space.virtual_stages)
                      if get_schedule(name).check(pp, v, m) is None and pp * v <= layers), None)
            if v is not None:
                yield place(instance, sizing.plan(name, v), CrossBuilding.PP)

    return smallest_fitting(instance, space, build, min_pp=max(2, len(instance.cluster.buildings)), grow_cp=True)
