"""``production``: the Megatron-style heuristic (DESIGN §5) a team would run without a planner.

TP = the NVLink domain (capped by the heads), the smallest PP that fits memory (with the largest EP
for MoE models), DP across buildings (``plan_defaults``: one building when the job fits, else whole
replicas per building; layers split as the planner's model splits them, so ``solve`` can start
from the plan), interleaved 1F1B with v = 2 where it runs (else 1F1B), micro-batch 1, ZeRO-1,
the least recompute that fits, default network settings (``heuristic.smallest_fitting``).

``production_plans`` returns those plans for every schedule of the space at that PP; the baseline
reports the fastest simulated one, and ``solve`` starts from all of them.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..optimizer.neighbourhood import counts_of, place
from ..optimizer.space import DesignSpace
from ..plan_defaults import fill_defaults
from ..schedules import get_schedule
from ..spec import Instance, Plan
from .heuristic import Sizing, smallest_fitting
from .registry import register_plans

PREFERRED_SCHEDULES = ("interleaved-1f1b", "1f1b")
PREFERRED_VIRTUAL_STAGES = 2


@register_plans("production", "Megatron-style: TP = NVLink domain, smallest PP that fits, DP across buildings, "
                              "interleaved 1F1B (v=2), ZeRO-1, default network")
def production_plans(instance: Instance, space: DesignSpace) -> list[Plan]:
    """Valid heuristic plans at the smallest PP that fits (empty if none fits)."""
    rank = {name: i for i, name in enumerate(PREFERRED_SCHEDULES)}
    schedules = sorted(space.schedules, key=lambda s: (rank.get(s, len(rank)), s))
    layers = instance.job.model_spec.layers

    def build(sizing: Sizing) -> Iterator[Plan | None]:
        pp, m = sizing.pp, sizing.num_microbatches
        for name in schedules if pp > 1 else schedules[:1]:
            schedule = get_schedule(name)
            v = next((v for v in sorted(space.virtual_stages, reverse=True)
                      if schedule.check(pp, v, m) is None and pp * v <= layers), None)
            if v is None or schedule.check(pp, min(v, PREFERRED_VIRTUAL_STAGES), m) is not None:
                continue
            try:
                filled = fill_defaults(instance, sizing.plan(name, min(v, PREFERRED_VIRTUAL_STAGES)))
            except ValueError:
                yield None
                continue
            assert filled.placement is not None  # same counts, the layer split of the planner's family
            yield place(instance, filled, filled.placement.cross_building, counts_of(instance, filled))

    return smallest_fitting(instance, space, build)
