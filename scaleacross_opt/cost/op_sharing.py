"""How long one op lasts when the traffic classes inside it share the resources they cross (closed form).

An op's communication (``PipelineGroup.op_flows``) runs in phases: the flows beside the whole op (ZeRO-3's
prefetched gathers) start with the inline ones (the exposed EP all-to-all its compute waits for); the compute
(the op's duration less its inline flows' seconds alone) and the flows beside it (the CP ring, TP's NVLink
collectives, an all-to-all a paired micro-batch hides) start once the inline ones end; the op ends when all
are done. The op's duration already charges each class alone (a gather longer than its layer's pass is
exposed, ``cost.step._chunk_cost``); where flows of one op together overfill a resource, they also slow each
other — a ZeRO-3 gather and an all-to-all on one NIC: the all-to-all, which the compute waits for, runs at the
speed the fair share leaves it (``cost.flows``), and the gather runs on into the compute.

``stretched_group`` runs each op of a group alone, its flows sharing by that law, and lengthens it by what
the sharing costs. The simulator runs the same phases in every op with the other ops' flows, the pipeline's
transfers and the DP syncs beside them, which only slow them more, so the stretched op stays a lower bound of
the simulated one. Ops with the same flows (the stages of one building) are run once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..schedules.base import OpKind
from ..schedules.registry import get_schedule
from .flows import FlowNetwork
from .workload import OpFlow, PipelineGroup, StepWorkload

# (phase, seconds alone, ((resource, demand), …)) of one flow of an op
_Flow = tuple[str, float, tuple[tuple[object, float], ...]]
QUEUED = -1  # the key of a queued flow in the op's network


@dataclass(frozen=True)
class BucketQueue:
    """Flows served one after another beside an op, as the simulator releases a chunk's gradient buckets
    (``StepWorkload.dp_jobs``): (fraction f of the op, seconds alone) each, released (1 − f)·duration before the
    compute ends but not before it starts; all with the same ``uses`` ((resource, demand), …)."""

    buckets: tuple[tuple[float, float], ...]
    uses: tuple[tuple[object, float], ...]


def shared_op_s(duration_s: float, flows: list[_Flow], queue: BucketQueue | None = None) -> float:
    """Seconds one op of ``duration_s`` (its inline flows' seconds alone included) takes when its ``flows``
    share their resources fairly: the ``op`` and ``inline`` flows start at 0, the compute and the ``compute``
    flows when the last inline flow ends, the op ends when all are done. ``queue``: flows beside it that it
    does not wait for."""
    inline_s = sum(seconds for phase, seconds, _ in flows if phase == "inline")
    net = FlowNetwork()
    for k, (phase, seconds, uses) in enumerate(flows):
        if phase != "compute":
            net.start(k, seconds, uses)
    inline_left = sum(phase == "inline" for phase, _, _ in flows)
    compute_end = math.inf
    waiting: list[tuple[float, float]] = []  # (release, seconds alone) of the queued flows not yet started

    def start_compute(t: float) -> None:
        nonlocal compute_end, waiting
        compute_end = t + duration_s - inline_s
        for k, (phase, seconds, uses) in enumerate(flows):
            if phase == "compute":
                net.start(k, seconds, uses)
        if queue is not None:
            waiting = [(max(t, compute_end - (1 - f) * duration_s), seconds) for f, seconds in queue.buckets]

    if not inline_left:
        start_compute(0.0)
    own_left, serving, end = len(flows), False, 0.0
    while own_left:
        release = waiting[0][0] if waiting and not serving else math.inf
        t = min(net.next_finish(), release)
        for k in net.advance(t):
            if k == QUEUED:
                serving = False
                continue
            own_left -= 1
            end = t
            if flows[k][0] == "inline":
                inline_left -= 1
                if not inline_left:
                    start_compute(t)
        if waiting and not serving and waiting[0][0] <= t:
            _, seconds = waiting.pop(0)
            net.start(QUEUED, seconds, queue.uses)
            serving = True
    return max(end, compute_end)


def _overfills(flows: list[_Flow]) -> bool:
    """Whether the flows that may run at once (op + inline, op + compute) ask more than some resource holds."""
    for phases in (("op", "inline"), ("op", "compute")):
        load: dict[int, float] = {}
        for phase, _, uses in flows:
            if phase in phases:
                for r, u in uses:
                    load[r] = load.get(r, 0.0) + u
        if any(total > 1.0 + 1e-9 for total in load.values()):
            return True
    return False


def _op_flows(op_flows: tuple[OpFlow, ...], kind: int, stage: int, chunk: int,
              numbers: dict[str, int]) -> list[_Flow]:
    """The flows of one op of ``kind`` (F, B, W), its resources numbered by ``numbers`` (extended as met)."""
    out = []
    for flow in op_flows:
        seconds = float(flow.seconds[kind, stage, chunk])
        if seconds > 0:
            demand = flow.demand[stage][chunk]
            uses = tuple((numbers.setdefault(r, len(numbers)), u) for r, u in demand.items() if u > 0)
            out.append((flow.phase, seconds, uses))
    return out


def _durations(group: PipelineGroup, splits_backward: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """F, B and W op durations; a backward not split into B and W runs as one op of B + W."""
    return group.fwd_s, group.bwd_input_s if splits_backward else group.bwd_s, group.bwd_weight_s


def stretched_group(group: PipelineGroup, splits_backward: bool) -> tuple[PipelineGroup, np.ndarray]:
    """``group`` with every op lengthened by what its own flows lose to sharing (``shared_op_s``), and that
    loss per stage and micro-batch (pp,). An unsplit backward's loss is charged to B."""
    pp, v = group.fwd_s.shape
    loss = np.zeros((3, pp, v))
    if group.op_flows:
        seen: dict[tuple, float] = {}
        durations = _durations(group, splits_backward)
        for kind, s, c in np.ndindex(3, pp, v):
            flows = _op_flows(group.op_flows, kind, s, c, {})
            if len(flows) < 2 or not _overfills(flows):
                continue
            duration = float(durations[kind][s, c])
            key = (duration, tuple(flows))
            if key not in seen:
                seen[key] = max(0.0, shared_op_s(duration, flows) - duration)
            loss[kind, s, c] = seen[key]
    if not loss.any():
        return group, np.zeros(pp)
    stretched = replace(group, fwd_s=group.fwd_s + loss[0], bwd_input_s=group.bwd_input_s + loss[1],
                        bwd_weight_s=group.bwd_weight_s + loss[2])
    return stretched, loss.sum(axis=(0, 2))


def last_backward_loss(workload: StepWorkload, group: PipelineGroup, stretched: PipelineGroup) -> np.ndarray:
    """(pp, v): how much longer each chunk's last backward op (W where the schedule splits the backward, else
    B + W) of ``group`` lasts than in ``stretched`` (``stretched_group`` of it: its own flows' sharing) because
    the chunk's gradient buckets, released k/n into it and served one after another on the stage's DP stream
    (``StepWorkload.dp_jobs``), share its flows' resources (a ZeRO-3 reduce-scatter beside the gathers of the op
    that produces its gradients)."""
    splits_backward = get_schedule(workload.schedule).splits_backward
    kind = OpKind.W if splits_backward else OpKind.B
    durations = _durations(group, splits_backward)[kind]
    shared = _durations(stretched, splits_backward)[kind]
    loss = np.zeros(durations.shape)
    seen: dict[tuple, float] = {}
    for s, c in np.ndindex(*durations.shape):
        sync_s, n = float(workload.dp_sync_s[s, c]), int(workload.dp_buckets[s, c])
        numbers: dict[str, int] = {}
        flows = _op_flows(group.op_flows, kind, s, c, numbers)
        if sync_s <= 0 or not flows:
            continue
        uses = tuple((numbers.setdefault(r, len(numbers)), seconds / sync_s)
                     for r, seconds in workload.dp_sync_uses[s][c].items() if seconds > 0)
        if not _overfills([*flows, ("compute", sync_s, uses)]):
            continue
        duration, alone = float(durations[s, c]), float(shared[s, c])
        key = (duration, alone, tuple(flows), sync_s, n, uses)
        if key not in seen:
            queue = BucketQueue(tuple(((k + 1) / n, sync_s / n) for k in range(n)), uses)
            seen[key] = max(0.0, shared_op_s(duration, flows, queue) - alone)
        loss[s, c] = seen[key]
    return loss
