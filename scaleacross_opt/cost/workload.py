"""The per-op durations of one training step: the contract between the cost model and the simulator.

``cost.step.build_workload(instance, plan)`` fills a ``StepWorkload``; the closed-form estimate and
the discrete-event simulator both consume it, so they differ only in how they compose the ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

import numpy as np

from ..schedules.common import UNIT_OP_TIMES
from ..schedules.registry import get_schedule

# Schedules that order ops by their durations get the plan's F:B:W ratio in steps of 1/8 of F (coarse
# enough that similar plans share one cached op order).
OP_TIME_STEPS = 8


@dataclass(frozen=True)
class LinkShare:
    """A directed path one replica's pipeline transfers use, as seen by that one replica.

    ``bandwidth_bytes_per_s`` is this replica's share of the effective bandwidth (after the network
    layer's efficiency) when every replica that crosses the same path transfers at once; transfers of
    the same replica that overlap on it share it further (the simulator models that).
    """

    src_building: str
    dst_building: str
    bandwidth_bytes_per_s: float
    latency_s: float

    def transfer_s(self, num_bytes: float) -> float:
        """Time of one transfer with the path to itself: latency + bytes ÷ bandwidth."""
        return self.latency_s + num_bytes / self.bandwidth_bytes_per_s


@dataclass(frozen=True)
class OpFlow:
    """One traffic class's communication inside every F, B and W op of a pipeline group.

    ``seconds[k, s, c]``: per op of kind k (``OpKind``: F, B, W) of (stage s, chunk c), with the network
    to itself; ``demand[s][c]``: the share of each resource it occupies while it runs (``cost.flows``);
    ``phase``: when it runs — ``inline``: first, the op's compute waits for it (the exposed EP all-to-all,
    part of the op's duration); ``op``: beside the whole op from its start (ZeRO-3 gathers, prefetched;
    never longer than the op); ``compute``: beside the compute that follows the inline flows (the CP
    ring's K/V exchange; the EP all-to-all hidden behind a paired micro-batch; TP's NVLink collectives,
    spread over the whole compute at their average rate; never longer than that compute at full speed,
    unless NVLink cannot carry TP's bytes in it). The op ends when all are done.
    """

    name: str
    seconds: np.ndarray
    demand: tuple[tuple[dict[str, float], ...], ...]
    phase: Literal["inline", "op", "compute"]


@dataclass(frozen=True)
class PipelineGroup:
    """Replicas whose pipelines have the same stage → building map (same speeds, same links).

    Arrays have shape (pp, virtual_stages): seconds per micro-batch for stage s, chunk c, including
    the exposed part of TP/CP/EP communication and any recompute.

    Shared resources (``cost.flows``) are named ``link A->B`` (a cross-building link, one direction,
    all replicas' traffic on it), ``NIC <group> stage <s> tx|rx`` and ``NVLink <group> stage <s> tx|rx`` (one
    GPU of that stage of this group, per direction). ``transfer_uses[(a, b)]``: resource-seconds (bytes ÷
    capacity) one pipeline transfer from stage a to stage b needs, all replicas of the group at once.
    ``op_flows``: the traffic inside its ops that crosses NICs, NVLink or links (``OpFlow``).
    """

    name: str
    stage_building: tuple[str, ...]
    fwd_s: np.ndarray
    bwd_input_s: np.ndarray
    bwd_weight_s: np.ndarray
    num_replicas: int
    transfer_uses: dict[tuple[int, int], dict[str, float]] = field(default_factory=dict)
    op_flows: tuple[OpFlow, ...] = ()

    @property
    def bwd_s(self) -> np.ndarray:
        """Full backward (input-grad + weight-grad) per micro-batch."""
        return self.bwd_input_s + self.bwd_weight_s


@dataclass(frozen=True, eq=False)
class DpJobs:
    """The gradient buckets of every chunk as one flat list of DP jobs, per stage in chunk then bucket order.

    Bucket k (0-based) of a chunk's n equal buckets holds the gradients its last backward op (W when the
    schedule splits the backward, else B) produces between ``k/n`` (``needed_at``) and ``(k+1)/n``
    (``ready_at``) of that op: its sync is released at ``ready_at`` of the op; after the optimizer its
    ZeRO-1/2 gather (forward order) must be done when the next step's first forward of the chunk reaches
    ``needed_at`` of its layers. ``part`` = 1/n: the share of the chunk's seconds and resource-seconds.
    """

    stage: np.ndarray  # (N,) int
    chunk: np.ndarray  # (N,) int
    ready_at: np.ndarray  # (N,)
    needed_at: np.ndarray  # (N,)
    part: np.ndarray  # (N,)
    sync_s: np.ndarray  # (N,) seconds alone of the bucket's gradient sync
    gather_s: np.ndarray  # (N,) seconds alone of the bucket's ZeRO-1/2 parameter gather (0 when none)

    @classmethod
    def of(cls, buckets: np.ndarray, sync_s: np.ndarray, gather_s: np.ndarray) -> DpJobs:
        """The jobs of chunks (s, c) with ``buckets[s, c]`` buckets and ``sync_s`` / ``gather_s`` seconds each."""
        counts = buckets.ravel().astype(np.int64)
        index = np.repeat(np.arange(counts.size), counts)
        bucket = np.arange(index.size) - np.repeat(np.cumsum(counts) - counts, counts)
        n = counts[index].astype(np.float64)
        stage, chunk = np.unravel_index(index, buckets.shape)
        return cls(stage=stage, chunk=chunk, ready_at=(bucket + 1) / n, needed_at=bucket / n, part=1.0 / n,
                   sync_s=sync_s.ravel()[index] / n, gather_s=gather_s.ravel()[index] / n)

    def __len__(self) -> int:
        return int(self.stage.size)


@dataclass(frozen=True)
class StepWorkload:
    """Everything needed to time one step of a plan."""

    schedule: str
    pp: int
    virtual_stages: int
    num_microbatches: int
    groups: tuple[PipelineGroup, ...]
    p2p_bytes: float  # activation (forward) or activation-gradient (backward) bytes per micro-batch per boundary
    links: dict[tuple[str, str], LinkShare]  # (src, dst) building; (b, b) is the intra-building path
    dp_sync_s: np.ndarray  # (pp, v): time to sync one chunk's gradients across DP with the network to itself
    dp_gather_s: np.ndarray  # (pp, v): ZeRO-1/2 all-gather of one chunk's updated weights after the optimizer
    dp_buckets: np.ndarray  # (pp, v) int ≥ 1: equal buckets a chunk's sync and gather run in (``DpJobs``)
    # [s][c]: resource-seconds (PipelineGroup's resource names) one chunk's sync / gather needs, all its
    # DP groups at once: the routes of its ring, and every group's NICs of the stage
    dp_sync_uses: tuple[tuple[dict[str, float], ...], ...]
    dp_gather_uses: tuple[tuple[dict[str, float], ...], ...]
    dp_shared: np.ndarray  # (pp,) bool: the stage's DP group crosses buildings
    optimizer_s: float  # optimizer step (after all gradient syncs)
    # per class (tp, cp, ep; dp = ZeRO-3 gathers): exposed time per step on the slowest stage, inside fwd/bwd
    exposed_comm_s: dict[str, float]
    # seconds per step each shared resource (building links, a GPU's NIC and NVLink) needs for all traffic classes
    resource_busy_s: dict[str, float]

    @cached_property
    def dp_jobs(self) -> DpJobs:
        """Every chunk's gradient buckets as DP jobs (``DpJobs``)."""
        return DpJobs.of(self.dp_buckets, self.dp_sync_s, self.dp_gather_s)

    @property
    def busiest_resource(self) -> tuple[str, float]:
        """The shared resource with the most seconds of traffic per step (name, seconds); ('', 0) if none."""
        return max(self.resource_busy_s.items(), key=lambda item: (item[1], item[0]), default=("", 0.0))

    @property
    def resource_excess_key(self) -> str:
        """Breakdown key charged when the busiest resource outlasts the timeline: TP when it is a GPU's NVLink
        (TP's collectives are its main traffic), else DP when gradients cross buildings, else PP."""
        if self.busiest_resource[0].startswith("NVLink "):
            return "exposed_tp_s"
        return "exposed_dp_s" if bool(np.any(self.dp_shared)) or not any(
            a != b for a, b in self.links) else "exposed_pp_s"

    @property
    def sharing_key(self) -> str:
        """Breakdown key charged with the time the traffic classes inside the ops lose to sharing resources
        (``OpFlow``): DP with ZeRO-3's gathers, else EP with all-to-alls, else CP with rings, else PP."""
        classes = {flow.name.removesuffix("-hidden") for group in self.groups for flow in group.op_flows}
        return next((key for name, key in (("zero3", "exposed_dp_s"), ("ep", "exposed_ep_s"), ("cp", "exposed_cp_s"))
                     if name in classes), "exposed_pp_s")

    def op_times(self) -> tuple[int, int, int]:
        """Mean F, B, W op durations in units of F/OP_TIME_STEPS (each ≥ 1)."""
        means = [float(np.mean([getattr(g, name).mean() for g in self.groups]))
                 for name in ("fwd_s", "bwd_input_s", "bwd_weight_s")]
        if means[0] <= 0:
            return UNIT_OP_TIMES
        f, b, w = (max(1, round(OP_TIME_STEPS * x / means[0])) for x in means)
        return f, b, w

    def candidate_op_times(self) -> list[tuple[int, int, int]]:
        """Relative op durations of the op orders this step may run: the schedule's own order, and for
        schedules that order by op durations also the one for this workload's F:B:W ratio (neither
        greedy order is always the faster; the simulator runs both and keeps the faster)."""
        out = [UNIT_OP_TIMES]
        if get_schedule(self.schedule).orders_by_op_times and self.op_times() != UNIT_OP_TIMES:
            out.append(self.op_times())
        return out

    def link(self, src: str, dst: str) -> LinkShare:
        """The path from building ``src`` to ``dst``."""
        return self.links[(src, dst)]
