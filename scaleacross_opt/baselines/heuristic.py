"""The loop the rule-of-thumb baselines share: the smallest pipeline that fits memory.

Megatron-style sizing (Narayanan et al., SC'21): TP = the largest allowed degree (the NVLink domain,
capped by the heads), the smallest CP (or, for schedules that need many micro-batches, the smallest CP
that runs them) and micro-batch, ZeRO at its lowest allowed stage, the default
network; then PP ascending, for each the largest EP, then recompute modes in the space's order (none
before selective before full), until some plan of the baseline is valid (memory included).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..optimizer.space import DesignSpace
from ..spec import Instance, NetworkConfig, Plan, Recompute
from ..validation.plan_checks import validate_plan


@dataclass(frozen=True)
class Sizing:
    """Degrees and per-GPU choices fixed by the sizing loop; a baseline adds schedule and placement."""

    tp: int
    cp: int
    pp: int
    dp: int
    ep: int
    micro_batch_size: int
    recompute: Recompute
    zero_stage: int
    network: NetworkConfig
    num_microbatches: int

    def plan(self, schedule: str, virtual_stages: int) -> Plan:
        """The plan with this sizing, ``schedule`` and ``virtual_stages`` (placement left to the caller)."""
        return Plan(tp=self.tp, cp=self.cp, pp=self.pp, dp=self.dp, ep=self.ep, micro_batch_size=self.micro_batch_size,
                    recompute=self.recompute, zero_stage=self.zero_stage, network=self.network, schedule=schedule,
                    virtual_stages=virtual_stages)


# Builds a baseline's placed plans (None: cannot be placed) for one sizing.
Builder = Callable[[Sizing], Iterable[Plan | None]]


def default_network(space: DesignSpace) -> NetworkConfig:
    """The first allowed option of each traffic class (the catalog default unless search excludes it)."""
    intra = space.intra_network[0]
    return NetworkConfig(intra_building=intra, cross_building=space.cross_network[0] if space.cross_network else intra)


def smallest_fitting(instance: Instance, space: DesignSpace, build: Builder, min_pp: int = 1,
                     grow_cp: bool = False) -> list[Plan]:
    """The valid plans ``build`` makes at the first (pp ≥ ``min_pp``, ep, recompute) where any is valid;
    with ``grow_cp``, CP degrees are tried in ascending order, each with every pp, until one gives a
    valid plan (more CP ranks per replica, fewer replicas: more micro-batches per pipeline)."""
    n, gbs = instance.num_gpus, instance.job.global_batch_size
    tp, mbs = max(space.tp), min(space.micro_batch_sizes)
    for cp, pp in ((cp, pp) for cp in sorted(space.cp)[:None if grow_cp else 1] for pp in sorted(space.pp)
                   if pp >= min_pp):
        if n % (tp * cp * pp) or gbs % (n // (tp * cp * pp) * mbs):
            continue
        dp = n // (tp * cp * pp)
        for ep in sorted(space.ep, reverse=True):
            for recompute in space.recompute:
                sizing = Sizing(tp, cp, pp, dp, ep, mbs, recompute, min(space.zero_stages), default_network(space),
                                gbs // (dp * mbs))
                found = [plan for plan in build(sizing) if plan is not None and not validate_plan(plan, instance)]
                if found:
                    return found
    return []
