"""Discrete-event engine: one training step of a ``StepWorkload``.

Model (DESIGN.md §4). Every pipeline group runs its replicas' stages as compute streams executing
the schedule's op order. An op starts when its stream is free and its data dependency arrived:

* F(mb, k) needs F(mb, k−1) (k = layer position, ``schedule.chunk_stage``);
* B(mb, k) needs B(mb, k+1), or F(mb, k) at the last position; W(mb, k) needs B(mb, k).
  (B's need of F(mb, k) and W's of B(mb, k) are on the same stream and earlier in it — checked
  when the op graph is built — so the stream order already enforces them.)

A dependency between different stages is a point-to-point transfer of ``p2p_bytes``: it waits first come,
first served on its sender's path to that peer (a cross-building directed building pair is one path for the
whole group; inside a building each directed stage pair is its own — one NCCL communicator per peer,
Megatron's p2p ops), is then serialised (bytes ÷ the replica's share of the path) and arrives one latency
later.

**Shared resources.** Every traffic class is a flow on the resources it crosses (``cost.flows``): a
GPU's NIC each way, its NVLink each way and each cross-building link each way, with capacity 1 and the
resource-seconds the workload lists for it — pipeline transfers (``PipelineGroup.transfer_uses``), the
traffic inside each forward and backward (``op_flows``: ZeRO-3 parameter gathers, the CP ring, the EP
all-to-all hidden behind a paired micro-batch and TP's NVLink collectives beside the compute, the op ending
when all are done; the exposed EP all-to-all before the rest of the op), DP gradient syncs and
ZeRO-1/2 parameter gathers (``dp_sync_uses`` / ``dp_gather_uses``).
Concurrent flows share each resource max-min fairly, so a sync overlapping the backward slows the gradient
transfers on the same NIC or link, and every stage's ZeRO-3 gathers split the link they cross.

DP sync: a chunk's gradients sync in equal buckets (``workload.dp_jobs``; Megatron overlap_grad_reduce,
PyTorch DDP), bucket k of n released once k/n of the chunk's last backward op (W if split, else B) ran in
every group (one bucket at the op's end for a plan whose sync follows the backward); each stage's buckets
run serialised on its DP stream in order of release, so how much of the sync hides comes out of the
timeline. The optimizer step follows the last sync. ZeRO-1/2 then all-gather the updated weights bucket by
bucket (same streams, same sharing); the next step's first forward of a chunk needs bucket k once it has
run k/n of its layers, so the step lasts until every gather ends, less its ``cost.step.gather_windows``
(the step is periodic). Finally, no step is
shorter than the busiest shared resource (``workload.resource_busy_s``: all flows' seconds on it per step).

**Symmetry** (what keeps 100k GPUs cheap): every pipeline group stands for its ``num_replicas`` identical
replicas, and one representative GPU per (group, stage) stands for the stage's tp·cp GPUs; resource-seconds
already count every replica's bytes on a shared link, so one representative per group is simulated and the
cost grows with pp·v·m, not with the GPU count.

Design (fastest exact method):

1. The op graph — ops grouped by stage in stream order, stream predecessor, data predecessor,
   topological order, peak in-flight activations — depends only on (schedule, pp, v, m) and is
   built once (``op_graph``, lru-cached) as numpy arrays; building it validates the order
   (every op exactly once, same-stage dependencies earlier in the stream, no deadlock).
2. Each group alone: a list-scheduling pass in topological order computes start = max(stream free, data
   arrived) with transfers charged latency + bytes ÷ bandwidth; if two transfers overlap on a path
   (checked vectorised) the group is re-run by an event loop (heapq) with first-come-first-served paths.
   The DP syncs are timed after it, sharing resources among themselves.
3. If no resource is ever asked for more than its capacity by those separate timelines (a vectorised
   sweep, ``_oversubscribed``), they are exact. Otherwise everything is re-run in one event loop
   (``_joint_timeline``) where the flows share the resources.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import deque
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from ..cost.flows import FlowNetwork
from ..cost.step import gather_windows
from ..cost.workload import OpFlow, PipelineGroup, StepWorkload
from ..errors import SimulationDeadlineError
from ..schedules import get_schedule
from ..schedules.base import OpKind
from ..schedules.common import UNIT_OP_TIMES

DEADLINE_CHECK_EVENTS = 4096  # an event loop reads the clock once per this many events (~10 ms of work)


class _Clock:
    """A simulation's deadline (a ``time.perf_counter()`` value, None: none), read every few thousand events."""

    def __init__(self, deadline: float | None):
        self.deadline = deadline
        self.events = 0

    def check(self) -> None:
        """Raise ``SimulationDeadlineError`` if the deadline has passed."""
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise SimulationDeadlineError(f"simulation still running at its deadline ({self.events:,} events in)")

    def tick(self) -> None:
        """Count one event; check the deadline every ``DEADLINE_CHECK_EVENTS``."""
        self.events += 1
        if self.events % DEADLINE_CHECK_EVENTS == 0:
            self.check()


@dataclass(frozen=True, eq=False)
class OpGraph:
    """The op graph of one (schedule, pp, v, m): ops of stage s are ``stage_start[s]:stage_start[s+1]``."""

    pp: int
    virtual_stages: int
    num_microbatches: int
    splits_backward: bool
    stage: np.ndarray  # (n,) stage of each op
    kind: np.ndarray  # (n,) OpKind value
    microbatch: np.ndarray  # (n,)
    chunk: np.ndarray  # (n,)
    position: np.ndarray  # (n,) layer-order position chunk_stage(chunk, stage)
    stage_start: np.ndarray  # (pp+1,) offsets
    stream_prev: np.ndarray  # (n,) previous op on the same stage, −1 for the first
    data_dep: np.ndarray  # (n,) op whose output this op needs (−1 for F at position 0)
    remote: np.ndarray  # (n,) bool: data_dep is on another stage (a p2p transfer)
    order: np.ndarray  # (n,) a topological order
    order_list: list[int]  # ``order``, and stream_prev / data_dep permuted by it, as lists (hot loop)
    prev_in_order: list[int]
    dep_in_order: list[int]
    stream_next: np.ndarray  # (n,) next op on the same stage, −1 for the last
    consumers: np.ndarray  # (n, 2) ops whose data_dep is this op (−1 padded)
    pairs: np.ndarray  # (k, 2) distinct (src stage, dst stage) of transfers
    pair_index: np.ndarray  # (n,) row of ``pairs`` of the transfer feeding the op (−1 when local)
    last_backward: np.ndarray  # (pp, v) op index of the last backward (W if split, else B) per chunk
    peak_in_flight: np.ndarray  # (pp,) peak activations held, in micro-batches through the whole stage

    @property
    def num_ops(self) -> int:
        """Compute ops in one step of one pipeline."""
        return int(self.stage.size)


def candidate_op_graphs(workload: StepWorkload) -> list[OpGraph]:
    """The op orders ``workload`` may run (``StepWorkload.candidate_op_times``)."""
    shape = (workload.schedule, workload.pp, workload.virtual_stages, workload.num_microbatches)
    return [op_graph(*shape, times) for times in workload.candidate_op_times()]


@lru_cache(maxsize=256)
def op_graph(schedule_name: str, pp: int, virtual_stages: int, num_microbatches: int,
             times: tuple[int, int, int] = UNIT_OP_TIMES) -> OpGraph:
    """Build and validate the op graph of a schedule (cached), ordered for relative F, B, W durations
    ``times`` where the schedule uses them. ValueError on an invalid order."""
    schedule = get_schedule(schedule_name)
    v, m = virtual_stages, num_microbatches
    reason = schedule.check(pp, v, m)
    if reason:
        raise ValueError(reason)
    per_stage = schedule.timed_stage_ops(pp, v, m, times)
    kinds = (OpKind.F, OpKind.B, OpKind.W) if schedule.splits_backward else (OpKind.F, OpKind.B)
    expected = sorted((k, mb, c) for k in kinds for mb in range(m) for c in range(v))
    if len(per_stage) != pp:
        raise ValueError(f"{schedule_name}: {len(per_stage)} stage orders for pp={pp}")
    rows = []
    for s, ops in enumerate(per_stage):
        if sorted((op.kind, op.microbatch, op.chunk) for op in ops) != expected:
            raise ValueError(f"{schedule_name}: stage {s} does not run every (kind, mb, chunk) exactly once")
        rows += [(s, int(op.kind), op.microbatch, op.chunk) for op in ops]
    table = np.array(rows, dtype=np.int64).reshape(-1, 4)
    stage, kind, mb, chunk = table.T.copy()
    n = stage.size
    position = np.array([schedule.chunk_stage(pp, v, c, s) for c in range(v) for s in range(pp)]).reshape(v, pp)
    if sorted(position.ravel().tolist()) != list(range(pp * v)):
        raise ValueError(f"{schedule_name}: chunk_stage is not a bijection onto 0..{pp * v - 1}")
    pos = position[chunk, stage]
    stage_start = np.searchsorted(stage, np.arange(pp + 1))
    stream_prev = np.arange(-1, n - 1)
    stream_prev[stage_start[:-1]] = -1

    index = np.full((3, m, pp * v), -1, dtype=np.int64)  # op holding (kind, mb, position)
    index[kind, mb, pos] = np.arange(n)
    last = pp * v - 1
    data_dep = np.full(n, -1, dtype=np.int64)
    is_f, is_b, is_w = kind == OpKind.F, kind == OpKind.B, kind == OpKind.W
    f_dep = is_f & (pos > 0)
    data_dep[f_dep] = index[OpKind.F, mb[f_dep], pos[f_dep] - 1]
    b_mid = is_b & (pos < last)
    data_dep[b_mid] = index[OpKind.B, mb[b_mid], pos[b_mid] + 1]
    b_last = is_b & (pos == last)
    data_dep[b_last] = index[OpKind.F, mb[b_last], last]
    data_dep[is_w] = index[OpKind.B, mb[is_w], pos[is_w]]
    remote = np.zeros(n, dtype=bool)
    has_dep = data_dep >= 0
    remote[has_dep] = stage[data_dep[has_dep]] != stage[has_dep]

    # Same-stage needs (B after F(mb, k), W after B(mb, k)) must come earlier in the stream.
    local_dep = np.where(is_b, index[OpKind.F, mb, pos], np.where(is_w, data_dep, -1))
    late = (local_dep >= 0) & (local_dep > np.arange(n))
    if late.any():
        i = int(np.flatnonzero(late)[0])
        raise ValueError(f"{schedule_name}: stage {stage[i]} runs {OpKind(kind[i]).name}{mb[i]}.{chunk[i]} too early")

    order = _topological_order(stream_prev, data_dep)
    if order.size < n:
        raise ValueError(f"{schedule_name}: op order deadlocks for pp={pp}, v={v}, m={m}")

    stream_next = np.arange(1, n + 1)
    stream_next[stage_start[1:] - 1] = -1
    consumers = np.full((n, 2), -1, dtype=np.int64)
    dep_idx = np.flatnonzero(has_dep)
    slot = np.zeros(n, dtype=np.int64)
    for j, p in zip(dep_idx.tolist(), data_dep[dep_idx].tolist(), strict=True):  # ≤ 2 consumers per op
        consumers[p, slot[p]] = j
        slot[p] += 1
    pair_of = stage[np.maximum(data_dep, 0)] * pp + stage
    pair_codes, pair_index = np.unique(np.where(remote, pair_of, -1), return_inverse=True)
    if pair_codes.size and pair_codes[0] == -1:
        pair_codes, pair_index = pair_codes[1:], pair_index - 1
    pairs = np.stack([pair_codes // pp, pair_codes % pp], axis=1)

    last_backward = np.full((pp, v), -1, dtype=np.int64)
    final_kind = OpKind.W if schedule.splits_backward else OpKind.B
    sel = np.flatnonzero(kind == final_kind)  # increasing index = stream order
    last_backward[stage[sel], chunk[sel]] = sel

    held = np.where(is_f, 1.0, np.where(kind == final_kind, -1.0, 0.0)) / v  # held from F to last backward
    peak = np.array([np.cumsum(held[a:b]).max() for a, b in itertools.pairwise(stage_start)])
    return OpGraph(
        pp=pp, virtual_stages=v, num_microbatches=m, splits_backward=schedule.splits_backward,
        stage=stage, kind=kind, microbatch=mb, chunk=chunk, position=pos, stage_start=stage_start,
        stream_prev=stream_prev, data_dep=data_dep, remote=remote, order=order, order_list=order.tolist(),
        prev_in_order=stream_prev[order].tolist(), dep_in_order=data_dep[order].tolist(),
        stream_next=stream_next, consumers=consumers, pairs=pairs, pair_index=pair_index,
        last_backward=last_backward, peak_in_flight=peak,
    )


def _topological_order(stream_prev: np.ndarray, data_dep: np.ndarray) -> np.ndarray:
    """Kahn's algorithm over stream and data edges; shorter than n when the graph has a cycle."""
    n = stream_prev.size
    succ: list[list[int]] = [[] for _ in range(n)]
    indegree = [0] * n
    for i, (a, b) in enumerate(zip(stream_prev.tolist(), data_dep.tolist(), strict=True)):
        for p in (a, b):
            if p >= 0:
                succ[p].append(i)
                indegree[i] += 1
    ready = [i for i in range(n) if indegree[i] == 0]
    out: list[int] = []
    while ready:
        i = ready.pop()
        out.append(i)
        for j in succ[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                ready.append(j)
    return np.array(out, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class GroupTimeline:
    """Timeline of one pipeline group; per-op arrays are indexed like ``OpGraph`` ops."""

    name: str
    start: np.ndarray  # (n,) op start, s
    end: np.ndarray  # (n,) op end, s
    send: np.ndarray  # (n,) start of the transfer feeding the op (NaN when none)
    arrive: np.ndarray  # (n,) arrival of that transfer (NaN when none)
    resource: np.ndarray  # (n,) index into ``resources`` of that transfer (−1 when none)
    resources: tuple[str, ...]  # contention resources, e.g. "A->B" or "A: stage 1->2"
    busy_s: np.ndarray  # (pp,) compute seconds per stage
    makespan_s: float  # last op end
    contended: bool  # some transfers overlapped on a resource (event loop used)


@dataclass(frozen=True, eq=False)
class SimResult:
    """Outcome of one simulated step."""

    graph: OpGraph
    groups: tuple[GroupTimeline, ...]
    pipeline_end_s: float  # last compute op over all groups
    dp_start_s: np.ndarray  # (N,) start of each DP job's gradient sync (``StepWorkload.dp_jobs``)
    dp_end_s: np.ndarray  # (N,)
    optimizer_start_s: float
    optimizer_end_s: float
    gather_start_s: np.ndarray  # (N,) each DP job's ZeRO-1/2 all-gather of updated weights (all 0 when none)
    gather_end_s: np.ndarray  # (N,)
    timeline_end_s: float  # optimizer end, or later while the gathers delay the next step's forward
    step_time_s: float  # timeline end, or the busiest shared resource's seconds when longer
    apart_pipeline_end_s: float  # the same op order's last compute op with the classes timed apart

    @property
    def sharing_s(self) -> float:
        """How much later the pipeline ends because its classes share resources (0 when they never contend)."""
        return self.pipeline_end_s - self.apart_pipeline_end_s

    @property
    def exposed_dp_s(self) -> float:
        """DP sync time not hidden behind the pipeline."""
        return self.optimizer_start_s - self.pipeline_end_s

    @property
    def exposed_gather_s(self) -> float:
        """ZeRO-1/2 gather time the next step's forward waits for."""
        return self.timeline_end_s - self.optimizer_end_s

    @property
    def resource_excess_s(self) -> float:
        """Time the busiest shared resource needs beyond the timeline."""
        return self.step_time_s - self.timeline_end_s

    @property
    def num_ops(self) -> int:
        """Compute ops simulated (all groups)."""
        return self.graph.num_ops * len(self.groups)


def simulate_workload(workload: StepWorkload, share: bool = True, deadline: float | None = None) -> SimResult:
    """Simulate one step of ``workload`` (see the module docstring for the model) with each candidate op
    order; the fastest is the step (a framework picks its order from profiled times the same way).

    Each order is first timed with the classes apart; sharing resources slows flows and never speeds one
    up, so the joint timeline runs only for orders that need it, fastest first, until the rest cannot win
    (an assumption where a slower op could reorder a first-come-first-served path queue: not seen)
    (``share=False``: never; the classes meet only through the busiest-resource bound).
    ``deadline`` (a ``time.perf_counter()`` value): raise ``SimulationDeadlineError`` once it has passed
    (checked between phases and every ``DEADLINE_CHECK_EVENTS`` events), so a caller with a time limit is
    not held up by one plan of millions of ops."""
    clock = _Clock(deadline)
    graphs = candidate_op_graphs(workload)
    apart = [_simulate_order(graph, workload, joint=False, clock=clock) for graph in graphs]
    best: tuple[float, int, SimResult] | None = None
    for step, index in sorted((result.step_time_s, i) for i, (result, _) in enumerate(apart)):
        if best is not None and step > best[0]:
            break
        result, shares = apart[index]
        if shares and share:
            joint, _ = _simulate_order(graphs[index], workload, joint=True, clock=clock)
            result = replace(joint, apart_pipeline_end_s=result.pipeline_end_s)
        best = min(best or (math.inf, index, result), (result.step_time_s, index, result), key=lambda x: x[:2])
    assert best is not None
    return best[2]


def _simulate_order(graph: OpGraph, workload: StepWorkload, joint: bool, clock: _Clock
                    ) -> tuple[SimResult, bool]:
    """One step of ``workload`` running the op order ``graph``, and whether its classes contend (their
    timelines apart ask some resource for more than its capacity). ``joint``: time them together (the
    joint timeline), else apart (exact when they do not contend)."""
    clock.check()
    contended = _contended_resources(graph, workload)
    jobs = workload.dp_jobs
    if joint:
        groups, dp_start, dp_end = _joint_timeline(graph, workload, contended, clock)
    else:
        groups = tuple(_simulate_group(graph, group, workload, clock) for group in workload.groups)
        last = graph.last_backward[jobs.stage, jobs.chunk]
        # as in the joint timeline: ``1 − ready_at`` of the op before it ends, not before its compute starts
        ready = np.max([np.maximum(g.start[last] + _inline_s(graph, group)[last],
                                   g.end[last] - (1.0 - jobs.ready_at) * (g.end[last] - g.start[last]))
                        for g, group in zip(groups, workload.groups, strict=True)], axis=0)
        dp_start, dp_end = stream_jobs(workload, ready, workload.dp_sync_s, workload.dp_sync_uses)
    pipeline_end = max(g.makespan_s for g in groups)
    optimizer_start = max(pipeline_end, float(dp_end.max(initial=0.0)))
    optimizer_end = optimizer_start + workload.optimizer_s
    timeline_end = optimizer_end
    gather_start = gather_end = np.zeros(len(jobs))
    if jobs.gather_s.any():
        release = np.full(len(jobs), optimizer_end)
        gather_start, gather_end = stream_jobs(workload, release, workload.dp_gather_s, workload.dp_gather_uses)
        timeline_end = max(optimizer_end, float((gather_end - gather_windows(workload)).max()))
    _, busy = workload.busiest_resource
    result = SimResult(
        graph=graph, groups=groups, pipeline_end_s=pipeline_end, dp_start_s=dp_start, dp_end_s=dp_end,
        optimizer_start_s=optimizer_start, optimizer_end_s=optimizer_end, gather_start_s=gather_start,
        gather_end_s=gather_end, timeline_end_s=timeline_end, step_time_s=max(timeline_end, busy),
        apart_pipeline_end_s=pipeline_end,
    )
    return result, not joint and _oversubscribed(graph, workload, groups, dp_start, dp_end, contended)


def stream_jobs(workload: StepWorkload, ready: np.ndarray, chunk_s: np.ndarray,
                uses: tuple[tuple[dict[str, float], ...], ...]) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of the DP jobs (``workload.dp_jobs``) released at ``ready[j]``, of chunks that take
    ``chunk_s[s, c]`` seconds alone and need ``uses[s][c]`` resource-seconds (the sync's or the gather's).

    Each stage serves its jobs one at a time in order of release (ties by job); a job in progress is a flow
    (``chunk_shares``) sharing the resources max-min fairly (``cost.flows``) with the other stages' jobs
    in progress. When the stages' streams timed alone never ask a resource for more than its capacity at
    once, that timing is exact and the event loop is skipped.
    """
    jobs = workload.dp_jobs
    stage, chunk = jobs.stage.tolist(), jobs.chunk.tolist()
    work = chunk_s[jobs.stage, jobs.chunk] * jobs.part
    releases = sorted(zip(ready.tolist(), range(len(jobs)), strict=True))
    shares = chunk_shares(chunk_s, uses)
    start, end = _streams_alone(releases, stage, work.tolist(), workload.pp)
    if not _jobs_oversubscribe(workload, start, end, work, shares):
        return start, end
    work = work.tolist()
    queues: list[deque[int]] = [deque() for _ in range(workload.pp)]
    busy = [False] * workload.pp
    net = FlowNetwork()
    k = 0

    def serve(s: int, t: float) -> None:
        while queues[s] and not busy[s]:
            j = queues[s].popleft()
            start[j] = end[j] = t
            if work[j] > 0:
                net.start(j, work[j], shares[stage[j], chunk[j]])
                busy[s] = True

    while k < len(releases) or net:
        t = min(releases[k][0] if k < len(releases) else math.inf, net.next_finish())
        for j in net.advance(t):
            end[j], busy[stage[j]] = t, False
            serve(stage[j], t)
        while k < len(releases) and releases[k][0] <= t:
            j = releases[k][1]
            queues[stage[j]].append(j)
            serve(stage[j], t)
            k += 1
    return start, end


def _streams_alone(releases: list[tuple[float, int]], stage: list[int], work: list[float], pp: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of jobs served in order of release on their stage's stream, each at full speed."""
    start, end = np.zeros(len(stage)), np.zeros(len(stage))
    free = [-math.inf] * pp
    for t, j in releases:
        s = stage[j]
        start[j] = max(t, free[s])
        end[j] = start[j] + work[j]
        free[s] = end[j]
    return start, end


def _jobs_oversubscribe(workload: StepWorkload, start: np.ndarray, end: np.ndarray, work: np.ndarray,
                        shares: dict[tuple[int, int], list[tuple[str, float]]]) -> bool:
    """Whether DP jobs running over [start, end) at full speed ever ask a resource for more than its capacity
    (the shares of the jobs in progress on it summing above 1; a job ending at t and one starting at t
    touch). A resource only one stage's stream uses, at a share ≤ 1, never is: that stream runs one job at
    a time."""
    jobs = workload.dp_jobs
    users: dict[str, dict[tuple[int, int], float]] = {}
    for (s, c), chunk in shares.items():
        for key, share in chunk:
            users.setdefault(key, {})[s, c] = share
    running = work > 0
    for by_chunk in users.values():
        if len({s for s, _ in by_chunk}) == 1 and max(by_chunk.values()) <= 1.0 + 1e-9:
            continue
        table = np.zeros((workload.pp, workload.virtual_stages))
        for (s, c), share in by_chunk.items():
            table[s, c] = share
        share = table[jobs.stage, jobs.chunk]
        on = running & (share > 0)
        time = np.concatenate([end[on], start[on]])
        delta = np.concatenate([-share[on], share[on]])
        order = np.lexsort((delta, time))  # at one instant, ends (negative) before starts
        if np.cumsum(delta[order]).max(initial=0.0) > 1.0 + 1e-9:
            return True
    return False


def chunk_shares(chunk_s: np.ndarray, uses: tuple[tuple[dict[str, float], ...], ...]
                 ) -> dict[tuple[int, int], list[tuple[str, float]]]:
    """Per chunk (s, c), the shares of the resources its sync or gather crosses (``uses[s][c]`` resource-
    seconds over ``chunk_s[s, c]`` seconds alone): every bucket of the chunk, as a flow, asks the same."""
    return {(s, c): _shares(uses[s][c], float(seconds)) if seconds > 0 else []
            for (s, c), seconds in np.ndenumerate(chunk_s)}


def _shares(uses: dict[str, float], alone_s: float) -> list[tuple[str, float]]:
    """A flow's resource-seconds as shares of each resource at full speed (``FlowNetwork`` uses)."""
    return [(key, seconds / alone_s) for key, seconds in uses.items() if seconds > 0]


def _simulate_group(graph: OpGraph, group: PipelineGroup, workload: StepWorkload, clock: _Clock
                    ) -> GroupTimeline:
    """Timeline of one group: list-scheduling pass, event loop if transfers contend."""
    bwd = group.bwd_input_s if graph.splits_backward else group.bwd_s
    table = np.stack([group.fwd_s, bwd, group.bwd_weight_s]).astype(np.float64)  # (3, pp, v)
    if table.shape[1:] != (graph.pp, graph.virtual_stages):
        raise ValueError(f"group {group.name}: duration arrays must have shape (pp, v)")
    dur = table[graph.kind, graph.stage, graph.chunk]
    resources, pair_resource, work, latency = _resources(graph, group, workload)
    remote = graph.remote
    res = np.full(dur.size, -1, dtype=np.int64)
    res[remote] = pair_resource[graph.pair_index[remote]]
    serial, lat = np.zeros_like(dur), np.zeros_like(dur)
    serial[remote], lat[remote] = work[res[remote]], latency[res[remote]]

    end = _list_schedule(graph, dur, serial + lat)
    send = np.where(remote, end[graph.data_dep], np.nan)
    arrive = send + serial + lat
    contended = _overlaps(send[remote], serial[remote], res[remote])
    if contended:
        end, send, arrive = _event_loop(graph, dur, res, work, latency, clock)
    return GroupTimeline(
        name=group.name, start=end - dur, end=end, send=send, arrive=arrive, resource=res,
        resources=resources, busy_s=np.add.reduceat(dur, graph.stage_start[:-1]),
        makespan_s=float(end.max()), contended=contended,
    )


def _resources(
    graph: OpGraph, group: PipelineGroup, workload: StepWorkload
) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray]:
    """Contention resources of a group: names, resource per stage pair, transfer seconds alone, latency."""
    names: dict[str, int] = {}
    pair_resource = np.empty(len(graph.pairs), dtype=np.int64)
    work: list[float] = []
    latency: list[float] = []
    for k, (a, b) in enumerate(graph.pairs.tolist()):
        src, dst = group.stage_building[a], group.stage_building[b]
        name = f"{src}->{dst}" if src != dst else f"{src}: stage {a}->{b}"
        if name not in names:
            link = workload.link(src, dst)
            names[name] = len(names)
            work.append(workload.p2p_bytes / link.bandwidth_bytes_per_s)
            latency.append(link.latency_s)
        pair_resource[k] = names[name]
    return tuple(names), pair_resource, np.array(work), np.array(latency)


def _list_schedule(graph: OpGraph, dur: np.ndarray, transfer: np.ndarray) -> np.ndarray:
    """End times by one pass in topological order: start = max(stream free, data arrived)."""
    n = dur.size
    end = [0.0] * (n + 1)  # end[-1] = 0.0 stands for "no predecessor"
    order = graph.order
    for i, prev, dep, x, d in zip(
        graph.order_list, graph.prev_in_order, graph.dep_in_order, transfer[order].tolist(),
        dur[order].tolist(), strict=True,
    ):
        a = end[dep] + x
        b = end[prev]
        end[i] = (a if a > b else b) + d
    return np.array(end[:n])


def _overlaps(send: np.ndarray, serial: np.ndarray, res: np.ndarray) -> bool:
    """Whether two transfers' serialisation intervals overlap on one resource."""
    if send.size < 2:
        return False
    idx = np.lexsort((send, res))
    s, e, r = send[idx], (send + serial)[idx], res[idx]
    tol = 1e-12 * max(float(e.max()), 1e-300)
    return bool(np.any((r[1:] == r[:-1]) & (s[1:] < e[:-1] - tol)))


_OP_END, _ARRIVE = 0, 1


def _event_loop(
    graph: OpGraph, dur: np.ndarray, res: np.ndarray, work: np.ndarray, latency: np.ndarray, clock: _Clock
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact timeline with first-come-first-served transfers: (op end, transfer send, transfer arrival).

    Events are handled in time order, so a transfer sent at t starts at max(t, its resource's free
    time), occupies it for its serialisation time and arrives one latency later.
    """
    n = dur.size
    durs = dur.tolist()
    res_l = res.tolist()
    work_l, lat_l = work.tolist(), latency.tolist()
    stream_next, consumers = graph.stream_next.tolist(), graph.consumers.tolist()
    pending = ((graph.stream_prev >= 0).astype(np.int64) + (graph.data_dep >= 0)).tolist()
    end = [0.0] * n
    send = [float("nan")] * n
    arrive = [float("nan")] * n
    free = [0.0] * len(work_l)
    events: list[tuple[float, int, int]] = [(durs[i], _OP_END, i) for i in range(n) if pending[i] == 0]
    heapq.heapify(events)
    push, pop = heapq.heappush, heapq.heappop
    while events:
        clock.tick()
        t, etype, i = pop(events)
        if etype == _OP_END:
            end[i] = t
            ready = [stream_next[i]]
            for c in consumers[i]:
                if c < 0:
                    continue
                r = res_l[c]
                if r < 0:
                    ready.append(c)
                    continue
                send[c] = t
                free[r] = (t if t > free[r] else free[r]) + work_l[r]
                arrive[c] = free[r] + lat_l[r]
                push(events, (arrive[c], _ARRIVE, c))
        else:
            ready = [i]
        for j in ready:
            if j >= 0:
                pending[j] -= 1
                if pending[j] == 0:
                    push(events, (t + durs[j], _OP_END, j))
    return np.array(end), np.array(send), np.array(arrive)


def _oversubscribed(graph: OpGraph, workload: StepWorkload, groups: tuple[GroupTimeline, ...],
                    dp_start: np.ndarray, dp_end: np.ndarray, contended: set[str]) -> bool:
    """Whether the classes, timed apart (each group's transfers first come first served, the DP syncs
    sharing only among themselves), ever ask one of the ``contended`` resources for more than its capacity
    at once: then they slow each other and the joint timeline is needed. Each flow counts at its
    full-speed demand (a sync slowed by the other syncs asks less: this may re-run a timeline that was
    exact, never skip one that was not)."""
    if not contended:
        return False
    rows: list[tuple[np.ndarray, np.ndarray, str, float]] = []  # starts, ends, resource, demand

    def add(t0: np.ndarray, t1: np.ndarray, uses: dict[str, float], alone: float) -> None:
        rows.extend((t0, t1, key, seconds / alone) for key, seconds in uses.items() if key in contended)

    for timeline, group in zip(groups, workload.groups, strict=True):
        for k, (a, b) in enumerate(graph.pairs.tolist()):
            ops = graph.remote & (graph.pair_index == k)
            link = workload.link(group.stage_building[a], group.stage_building[b])
            work = workload.p2p_bytes / link.bandwidth_bytes_per_s
            if work > 0 and ops.any():
                done = timeline.arrive[ops] - link.latency_s  # serialisation ends
                add(done - work, done, group.transfer_uses.get((a, b), {}), work)
        inline = _inline_s(graph, group)
        for flow in group.op_flows:
            seconds = _op_flow_seconds(graph, flow)
            start = timeline.start + (inline if flow.phase == "compute" else 0.0)
            for st, chunks in enumerate(flow.demand):
                for c, demand in enumerate(chunks):
                    ops = (graph.stage == st) & (graph.chunk == c) & (seconds > 0)
                    if ops.any():
                        add(start[ops], start[ops] + seconds[ops], demand, 1.0)
    jobs = workload.dp_jobs
    for (st, c), alone in np.ndenumerate(workload.dp_sync_s):
        mine = (jobs.stage == st) & (jobs.chunk == c)
        if alone > 0:
            add(dp_start[mine], dp_end[mine], workload.dp_sync_uses[st][c], alone)
    if not rows:
        return False
    index = {key: i for i, key in enumerate(sorted(contended))}
    resource = np.concatenate([np.full(2 * t0.size, index[key]) for t0, _, key, _ in rows])
    # intervals shrunk by a rounding margin: back-to-back transfers of one queue touch, they do not overlap
    time = np.concatenate([np.concatenate([t0 + 1e-9 * (1 + np.abs(t0)), t1 - 1e-9 * (1 + np.abs(t1))])
                           for t0, t1, *_ in rows])
    delta = np.concatenate([np.concatenate([np.full(t0.size, u), np.full(t0.size, -u)]) for t0, _, _, u in rows])
    order = np.lexsort((delta, time, resource))  # at one instant, ends (negative) before starts
    return bool(np.cumsum(delta[order]).max() > 1.0 + 1e-9)


_COMPUTED, _ARRIVED, _RELEASED = 0, 1, 2  # timed events of the joint timeline


def _op_flow_seconds(graph: OpGraph, flow: OpFlow) -> np.ndarray:
    """(n,) seconds alone of ``flow`` inside each op of ``graph`` (the row of the op's kind)."""
    return flow.seconds[graph.kind, graph.stage, graph.chunk]


def _inline_s(graph: OpGraph, group: PipelineGroup) -> np.ndarray:
    """(n,) seconds alone of each op's inline flows (the communication its compute waits for)."""
    return sum((_op_flow_seconds(graph, flow) for flow in group.op_flows if flow.phase == "inline"),
               np.zeros(graph.num_ops))


def _contended_resources(graph: OpGraph, workload: StepWorkload) -> set[str]:
    """Resources whose flows may together ask for more than their capacity at some moment: per resource,
    Σ of the demands of every transfer path and, per stage, of the largest ZeRO-3 gather and DP sync (a
    stage runs one op and one sync at a time). The others never slow a flow."""
    most: dict[str, float] = {}

    def add(uses: dict[str, float], alone: float, into: dict[str, float]) -> None:
        for key, seconds in uses.items():
            into[key] = max(into.get(key, 0.0), seconds / alone)

    for group in workload.groups:
        for a, b in graph.pairs.tolist():
            link = workload.link(group.stage_building[a], group.stage_building[b])
            work = workload.p2p_bytes / link.bandwidth_bytes_per_s
            if work > 0:
                for key, seconds in group.transfer_uses.get((a, b), {}).items():
                    most[key] = most.get(key, 0.0) + seconds / work
        for flow in group.op_flows:  # a stage runs one op at a time
            for stage in range(graph.pp):
                largest: dict[str, float] = {}
                for c in range(graph.virtual_stages):
                    if flow.seconds[:, stage, c].any():
                        add(flow.demand[stage][c], 1.0, largest)
                for key, u in largest.items():
                    most[key] = most.get(key, 0.0) + u
    for stage in range(graph.pp):
        largest: dict[str, float] = {}
        for c in range(graph.virtual_stages):
            if workload.dp_sync_s[stage, c] > 0:
                add(workload.dp_sync_uses[stage][c], float(workload.dp_sync_s[stage, c]), largest)
        for key, u in largest.items():
            most[key] = most.get(key, 0.0) + u
    return {key for key, u in most.items() if u > 1.0 + 1e-9}


def _joint_timeline(graph: OpGraph, workload: StepWorkload, contended: set[str], clock: _Clock
                    ) -> tuple[tuple[GroupTimeline, ...], np.ndarray, np.ndarray]:
    """Every group's pipeline and the DP syncs in one event loop, all traffic sharing the resources.

    An op starts when its stream is free and its input arrived; its compute takes its duration, and its
    scale-out communication (``PipelineGroup.op_flows``: ZeRO-3 gathers, the CP ring, the EP all-to-all a
    paired micro-batch hides) runs beside it as flows: the op ends when all are done. Communication the
    compute waits for (an inline ``OpFlow``: the exposed EP all-to-all) is a flow first, then the rest of
    the op's duration runs with the flows beside it (in a layer the all-to-all and the attention's ring
    exchange are separate phases). A transfer waits first come, first served on its path (one NCCL
    communicator per peer, as in ``_event_loop``), then is a flow; it arrives one latency after its last
    byte left. A chunk's gradient bucket (``StepWorkload.dp_jobs``) is released ``ready_at`` into its
    chunk's last backward op in every group and runs on its stage's DP stream as a flow. Flows share every
    resource they cross max-min fairly (``cost.flows``), so PP transfers, EP all-to-alls, CP rings,
    ZeRO-3 gathers and DP syncs on one NIC or link slow each other.
    Only the ``contended`` resources (``_contended_resources``) are tracked: the others never bind.
    """
    n = graph.num_ops
    jobs = workload.dp_jobs
    net = FlowNetwork(contended)
    events: list[tuple[float, int, int, int]] = []
    stream_next, consumers = graph.stream_next.tolist(), graph.consumers.tolist()
    stage_of, chunk_of = graph.stage.tolist(), graph.chunk.tolist()
    is_last = {int(i): (s, c) for (s, c), i in np.ndenumerate(graph.last_backward)}
    chunk_jobs: dict[tuple[int, int], list[int]] = {}
    for j, key in enumerate(zip(jobs.stage.tolist(), jobs.chunk.tolist(), strict=True)):
        chunk_jobs.setdefault(key, []).append(j)
    last_ops: dict[tuple[int, int], list[tuple[float, float, float]]] = {}  # per group: start, compute end, dur
    dp_work = (workload.dp_sync_s[jobs.stage, jobs.chunk] * jobs.part).tolist()
    ready_at, chunk_of_job = jobs.ready_at.tolist(), jobs.chunk.tolist()
    dp_uses = chunk_shares(workload.dp_sync_s, workload.dp_sync_uses)
    dp_queue: list[deque[int]] = [deque() for _ in range(graph.pp)]
    dp_busy = [False] * graph.pp
    dp_start, dp_end = np.zeros(len(jobs)), np.zeros(len(jobs))
    state = []
    for group in workload.groups:
        bwd = group.bwd_input_s if graph.splits_backward else group.bwd_s
        dur = np.stack([group.fwd_s, bwd, group.bwd_weight_s])[graph.kind, graph.stage, graph.chunk]
        names, pair_resource, work, latency = _resources(graph, group, workload)
        res = np.full(n, -1, dtype=np.int64)
        res[graph.remote] = pair_resource[graph.pair_index[graph.remote]]
        flows: list[list[tuple[int, float]]] = [[] for _ in range(n)]  # per op: (op flow, seconds alone)
        inline = [0.0] * n  # per op: seconds of its inline flows (its compute is the rest of its duration)
        for k, flow in enumerate(group.op_flows):
            for i, seconds in enumerate(_op_flow_seconds(graph, flow).tolist()):
                if seconds > 0:
                    flows[i].append((k, seconds))
                    inline[i] += seconds if flow.phase == "inline" else 0.0
        pair_uses = {}
        for k, (a, b) in enumerate(graph.pairs.tolist()):
            w = float(work[pair_resource[k]])
            pair_uses[k] = _shares(group.transfer_uses.get((a, b), {}), w) if w > 0 else []
        state.append({
            "dur": dur.tolist(), "flows": flows, "res": res.tolist(), "pair": graph.pair_index.tolist(),
            "work": work.tolist(), "latency": latency.tolist(), "names": names, "pair_uses": pair_uses,
            "pending": ((graph.stream_prev >= 0).astype(np.int64) + (graph.data_dep >= 0)).tolist(),
            "parts": [0] * n, "start": [0.0] * n, "end": [0.0] * n, "send": [math.nan] * n,
            "arrive": [math.nan] * n, "queues": [[] for _ in names], "sending": [False] * len(names),
            "inline": inline, "inline_left": [0] * n, "shares": {}, "group": group,
        })

    def start_flows(g: int, i: int, t: float, phase: str) -> None:
        """Start op i's flows of ``phase`` (``OpFlow.phase``), each one more part the op waits for."""
        st = state[g]
        s, c = stage_of[i], chunk_of[i]
        for k, seconds in st["flows"][i]:
            flow = st["group"].op_flows[k]
            if flow.phase == phase:
                shares = st["shares"].setdefault((k, s, c), _shares(flow.demand[s][c], 1.0))
                net.start((phase, g, i), seconds, shares)
                st["parts"][i] += 1

    def start_compute(g: int, i: int, t: float) -> None:
        """Op i's compute (its duration less the inline flows') starts, with the flows of the compute phase;
        once every group's last backward of a chunk started, each of its buckets is released ``1 − ready_at``
        of the op before its compute ends (not before the compute starts), the latest over the groups."""
        st = state[g]
        start_flows(g, i, t, "compute")
        compute_end = t + (st["dur"][i] - st["inline"][i])
        heapq.heappush(events, (compute_end, _COMPUTED, g, i))
        if i in is_last:
            s, c = is_last[i]
            seen = last_ops.setdefault((s, c), [])
            seen.append((t, compute_end, st["dur"][i]))
            if len(seen) == len(state):
                for j in chunk_jobs[s, c]:
                    ready = max(max(t0, end - (1.0 - ready_at[j]) * dur) for t0, end, dur in seen)
                    heapq.heappush(events, (ready, _RELEASED, s, j))

    def start_op(g: int, i: int, t: float) -> None:
        """Op i starts: its inline flows (the exposed all-to-all its compute waits for) and the flows beside
        the whole op (ZeRO-3 prefetch); once the inline ones are done, its compute with the flows beside the
        compute (the CP ring: in a layer the all-to-all and the ring exchange are separate phases; the
        all-to-all a paired micro-batch hides). The op ends when all are done."""
        st = state[g]
        st["start"][i] = t
        st["parts"][i] = 1  # the compute
        start_flows(g, i, t, "op")
        before = st["parts"][i]
        start_flows(g, i, t, "inline")
        st["inline_left"][i] = st["parts"][i] - before
        st["parts"][i] = before
        if not st["inline_left"][i]:
            start_compute(g, i, t)

    def satisfy(g: int, i: int, t: float) -> None:
        pending = state[g]["pending"]
        pending[i] -= 1
        if pending[i] == 0:
            start_op(g, i, t)

    def send_next(g: int, r: int, t: float) -> None:
        st = state[g]
        while st["queues"][r] and not st["sending"][r]:
            c = st["queues"][r].pop(0)
            if st["work"][r] > 0:
                net.start(("xfer", g, c), st["work"][r], st["pair_uses"][st["pair"][c]])
                st["sending"][r] = True
            else:
                heapq.heappush(events, (t + st["latency"][r], _ARRIVED, g, c))

    def end_op(g: int, i: int, t: float) -> None:
        st = state[g]
        st["end"][i] = t
        if stream_next[i] >= 0:
            satisfy(g, stream_next[i], t)
        for c in consumers[i]:
            if c < 0:
                continue
            r = st["res"][c]
            if r < 0:
                satisfy(g, c, t)
                continue
            st["send"][c] = t
            st["queues"][r].append(c)
            send_next(g, r, t)

    def serve_dp(s: int, t: float) -> None:
        while dp_queue[s] and not dp_busy[s]:
            j = dp_queue[s].popleft()
            dp_start[j] = dp_end[j] = t
            if dp_work[j] > 0:
                net.start(("dp", s, j), dp_work[j], dp_uses[s, chunk_of_job[j]])
                dp_busy[s] = True

    def part_done(g: int, i: int, t: float) -> None:
        st = state[g]
        st["parts"][i] -= 1
        if st["parts"][i] == 0:
            end_op(g, i, t)

    for g, st in enumerate(state):
        for i in range(n):
            if st["pending"][i] == 0:
                start_op(g, i, 0.0)
    while events or net:
        clock.tick()
        t = min(events[0][0] if events else math.inf, net.next_finish())
        for what, a, b in net.advance(t):
            if what in ("op", "compute"):
                part_done(a, b, t)
            elif what == "inline":  # the rest of the op runs once every inline flow is done
                state[a]["inline_left"][b] -= 1
                if not state[a]["inline_left"][b]:
                    start_compute(a, b, t)
            elif what == "xfer":
                st = state[a]
                r = st["res"][b]
                st["sending"][r] = False
                heapq.heappush(events, (t + st["latency"][r], _ARRIVED, a, b))
                send_next(a, r, t)
            else:
                dp_end[b], dp_busy[a] = t, False
                serve_dp(a, t)
        while events and events[0][0] <= t:
            _, kind, a, b = heapq.heappop(events)
            if kind == _COMPUTED:
                part_done(a, b, t)
            elif kind == _ARRIVED:
                state[a]["arrive"][b] = t
                satisfy(a, b, t)
            else:
                dp_queue[a].append(b)
                serve_dp(a, t)
    timelines = []
    for st in state:
        if any(st["pending"]) or any(st["parts"]):
            raise RuntimeError("joint timeline ended with ops not run")  # the op graph was validated: a bug
        end = np.array(st["end"])
        dur = np.array(st["dur"])
        timelines.append(GroupTimeline(
            name=st["group"].name, start=np.array(st["start"]), end=end, send=np.array(st["send"]),
            arrive=np.array(st["arrive"]), resource=np.array(st["res"]), resources=st["names"],
            busy_s=np.add.reduceat(dur, graph.stage_start[:-1]), makespan_s=float(end.max()), contended=True,
        ))
    return tuple(timelines), dp_start, dp_end
