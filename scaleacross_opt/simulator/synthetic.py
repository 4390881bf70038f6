"""Hand-built workloads (uniform stages, buildings cut at given stages) for tests and benchmarks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..cost.workload import LinkShare, PipelineGroup, StepWorkload


def uniform_workload(
    schedule: str, pp: int, v: int, m: int, *, fwd_s: float = 1.0, bwd_input_s: float = 1.0,
    bwd_weight_s: float = 1.0, cuts: Sequence[int] = (), latency_s: float = 0.0, p2p_bytes: float = 0.0,
    bandwidth_bytes_per_s: float = float("inf"), dp_sync_s: float = 0.0, optimizer_s: float = 0.0,
    num_groups: int = 1, dp_gather_s: float = 0.0, dp_route_s: float = 0.0, dp_buckets: int = 1,
) -> StepWorkload:
    """Every (stage, chunk) takes the same time; stages before each cut form one building.

    Buildings are "b0", "b1", …; cross-building paths have ``latency_s``; every path (also inside a
    building) has ``bandwidth_bytes_per_s``, and a transfer between buildings fills the link it crosses
    while it runs. ``dp_route_s`` > 0 makes every stage's DP group cross buildings, its sync and gather
    each needing that many seconds of both directions of the link between b0 and b1. Every chunk's sync
    and gather run in ``dp_buckets`` buckets.
    """
    building = tuple(f"b{sum(s >= c for c in cuts)}" for s in range(pp))
    names = sorted(set(building))
    links = {
        (a, b): LinkShare(a, b, bandwidth_bytes_per_s, latency_s if a != b else 0.0) for a in names for b in names
    }
    shape = (pp, v)
    work = p2p_bytes / bandwidth_bytes_per_s
    crossing = {(a, b): {f"link {building[a]}->{building[b]}": work} for a in range(pp) for b in range(pp)
                if building[a] != building[b] and work > 0}
    groups = tuple(
        PipelineGroup(f"g{i}", building, np.full(shape, fwd_s), np.full(shape, bwd_input_s),
                      np.full(shape, bwd_weight_s), 1, transfer_uses=crossing)
        for i in range(num_groups)
    )
    route = {"link b0->b1": dp_route_s, "link b1->b0": dp_route_s} if dp_route_s > 0 else {}
    return StepWorkload(
        schedule=schedule, pp=pp, virtual_stages=v, num_microbatches=m, groups=groups, p2p_bytes=p2p_bytes,
        links=links, dp_sync_s=np.full(shape, dp_sync_s), dp_gather_s=np.full(shape, dp_gather_s),
        dp_sync_uses=tuple(tuple(route for _ in range(v)) for _ in range(pp)),
        dp_gather_uses=tuple(tuple(route if dp_gather_s else {} for _ in range(v)) for _ in range(pp)),
        dp_buckets=np.full(shape, dp_buckets), dp_shared=np.full(pp, dp_route_s > 0),
        optimizer_s=optimizer_s, exposed_comm_s={"tp": 0.0, "cp": 0.0, "ep": 0.0, "dp": 0.0}, resource_busy_s={},
    )
