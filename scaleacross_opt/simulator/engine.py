"""Discrete-event engine: one training step of a ``StepWorkload``.

Model (DESIGN.md §4). Every pipeline group runs its replicas' stages as compute streams executing
the schedule's op order. An op starts when its stream is free and its data dependency arrived:

* F(mb, k) needs F(mb, k−1) (k = layer position, ``schedule.chunk_stage``);
* B(mb, k) needs B(mb, k+1), or F(mb, k) at the last position; W(mb, k) needs B(mb, k).
  (B's need of F(mb, k) and W's of B(mb, k) are on the same stream and earlier in it — checked
  when the op graph is built — so the stream order already enforces them.)

A dependency between different stages is a point-to-point transfer of ``p2p_bytes``: serialisation
(bytes ÷ bandwidth) followed by the path's latency. Contention resources: a cross-building directed
link (src, dst building) is one resource shared by all the group's transfers on it; inside a
building every directed stage pair is its own resource (separate NICs) with the (b, b) path's
bandwidth. Transfers on one resource are served first come, first served: a replica's sends to one
peer are issued in order on one NCCL communicator (Megatron's p2p ops), each at the replica's share
of the path. Symmetry: every group stands for its ``num_replicas`` identical replicas (each
LinkShare is one replica's share of the path when all replicas transfer at once), so one
representative per group is simulated.

DP sync: for each stage, chunk syncs run serialised on the stage's DP stream, each starting once
that chunk's gradient buckets start to be ready in every group — ``workload.dp_overlap_fraction`` of
the chunk's last backward op (W if split, else B) before it ends (bucketed reduce, PyTorch DDP /
Megatron overlap_grad_reduce; 0 for a plan whose sync follows the backward) — in order of readiness.
Stages whose DP groups cross buildings (``dp_shared``) share the route: the syncs active at one
moment split it equally (processor sharing); stages inside buildings use their own NICs. The
optimizer step follows the last sync. ZeRO-1/2 then all-gather the updated weights (same streams,
same sharing); the next step's first forward of a stage waits for its first buckets, so the step
lasts until every gather of stage s ends, less ``cost.step.gather_windows`` (the chunk-0 forwards
of the stages before s and the ``dp_overlap_fraction`` of its own; the step is periodic).
Finally, no step is shorter than the busiest shared resource
(``workload.resource_busy_s``: all classes' bytes on a building's links or a GPU's NIC ÷ capacity),
which couples the classes the timeline keeps apart.

Design (fastest exact method, per group):

1. The op graph — ops grouped by stage in stream order, stream predecessor, data predecessor,
   topological order, peak in-flight activations — depends only on (schedule, pp, v, m) and is
   built once (``op_graph``, lru-cached) as numpy arrays; building it validates the order
   (every op exactly once, same-stage dependencies earlier in the stream, no deadlock).
2. A list-scheduling pass in topological order computes start = max(stream free, data arrived)
   with transfers charged latency + bytes ÷ bandwidth alone: one tight loop over plain lists.
3. If no two transfers overlap on a resource (checked vectorised), that timeline is exact.
   Otherwise the group is re-run by an event loop (heapq) in time order, where a transfer starts
   when its resource is free (first come, first served).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..cost.step import busiest_resource, gather_windows
from ..cost.workload import PipelineGroup, StepWorkload
from ..schedules import get_schedule
from ..schedules.base import OpKind
from ..schedules.common import UNIT_OP_TIMES


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
    dp_start_s: np.ndarray  # (pp, v) start of each chunk's DP sync
    dp_end_s: np.ndarray  # (pp, v)
    optimizer_start_s: float
    optimizer_end_s: float
    gather_start_s: np.ndarray  # (pp, v) ZeRO-1/2 all-gather of updated weights (empty when none)
    gather_end_s: np.ndarray  # (pp, v)
    timeline_end_s: float  # optimizer end, or later while the gathers delay the next step's forward
    step_time_s: float  # timeline end, or the busiest shared resource's seconds when longer

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


def simulate_workload(workload: StepWorkload) -> SimResult:
    """Simulate one step of ``workload`` (see the module docstring for the model) with each candidate op
    order; the fastest is the step (a framework picks its order from profiled times the same way)."""
    results = [_simulate_order(graph, workload) for graph in candidate_op_graphs(workload)]
    return min(results, key=lambda result: result.step_time_s)


def _simulate_order(graph: OpGraph, workload: StepWorkload) -> SimResult:
    """One step of ``workload`` running the op order ``graph``."""
    groups = tuple(_simulate_group(graph, group, workload) for group in workload.groups)
    pipeline_end = max(g.makespan_s for g in groups)
    overlap = workload.dp_overlap_fraction
    last = graph.last_backward
    ready = np.max([g.end[last] - overlap * (g.end[last] - g.start[last]) for g in groups], axis=0)  # (pp, v)
    shared = np.asarray(workload.dp_shared, dtype=bool)
    dp_start, dp_end = shared_streams(ready, np.asarray(workload.dp_sync_s, dtype=np.float64),
                                      np.asarray(workload.dp_sync_route_s, dtype=np.float64), shared)
    optimizer_start = max(pipeline_end, float(dp_end.max()))
    optimizer_end = optimizer_start + workload.optimizer_s
    timeline_end = optimizer_end
    gather = np.asarray(workload.dp_gather_s, dtype=np.float64)
    gather_start = gather_end = np.zeros_like(gather)
    if gather.any():
        window = gather_windows(workload)[:, None]
        release = np.full_like(gather, optimizer_end)
        gather_start, gather_end = shared_streams(release, gather, np.asarray(workload.dp_gather_route_s), shared)
        timeline_end = max(optimizer_end, float((gather_end - window).max()))
    _, busy = busiest_resource(workload)
    return SimResult(
        graph=graph, groups=groups, pipeline_end_s=pipeline_end, dp_start_s=dp_start, dp_end_s=dp_end,
        optimizer_start_s=optimizer_start, optimizer_end_s=optimizer_end, gather_start_s=gather_start,
        gather_end_s=gather_end, timeline_end_s=timeline_end, step_time_s=max(timeline_end, busy),
    )


def shared_streams(ready: np.ndarray, work: np.ndarray, route: np.ndarray, shared: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of jobs (stage s, chunk c) of ``work[s, c]`` seconds alone, released at ``ready[s, c]``.

    Each stage serves its chunks one at a time in order of release (ties by chunk). Jobs of the
    stages flagged ``shared`` also need ``route[s, c]`` seconds of one shared route; the active ones
    get max-min fair shares of it (water-filling: a job needing the fraction route/work to go at full
    speed gets at most that), and progress at min(1/work, share/route) of the job per second.
    """
    start, end = np.zeros_like(ready), np.zeros_like(ready)
    orders: dict[int, list[int]] = {}
    for s in range(ready.shape[0]):
        order = [int(c) for c in np.argsort(ready[s], kind="stable")]
        if shared[s]:
            orders[s] = order
            continue
        t = 0.0
        for c in order:
            start[s, c] = t = max(t, ready[s, c])
            end[s, c] = t = t + work[s, c]
    heads = dict.fromkeys(orders, 0)
    free_at = dict.fromkeys(orders, 0.0)
    left: dict[int, float] = {}  # stage → fraction left of its job in progress
    t = 0.0
    while True:
        for s, order in orders.items():  # admit released jobs of idle stages (empty ones end at once)
            while s not in left and heads[s] < len(order) and max(ready[s, order[heads[s]]], free_at[s]) <= t:
                c = order[heads[s]]
                start[s, c] = max(ready[s, c], free_at[s])
                if work[s, c] > 0:
                    left[s] = 1.0
                else:
                    end[s, c] = free_at[s] = start[s, c]
                    heads[s] += 1
        pending = [max(ready[s, order[heads[s]]], free_at[s]) for s, order in orders.items()
                   if s not in left and heads[s] < len(order)]
        if not left:
            if not pending:
                return start, end
            t = min(pending)
            continue
        rates = _fair_rates({s: (work[s, orders[s][heads[s]]], route[s, orders[s][heads[s]]]) for s in left})
        dt = min([left[s] / rates[s] for s in left] + [p - t for p in pending if p > t])
        t += dt
        for s in list(left):
            left[s] -= dt * rates[s]
            if left[s] <= 1e-12:
                end[s, orders[s][heads[s]]] = free_at[s] = t
                heads[s] += 1
                del left[s]


def _fair_rates(jobs: dict[int, tuple[float, float]]) -> dict[int, float]:
    """Progress per second of jobs (work alone, route seconds) sharing one route max-min fairly."""
    rates: dict[int, float] = {}
    demand = {}
    for s, (alone, need) in jobs.items():
        if need <= 0:
            rates[s] = 1.0 / alone
        else:
            demand[s] = need / alone  # route fraction for full speed
    capacity = 1.0
    for k, s in enumerate(sorted(demand, key=lambda x: (demand[x], x))):
        share = min(demand[s], capacity / (len(demand) - k))
        capacity -= share
        rates[s] = share / jobs[s][1]
    return rates


def _simulate_group(graph: OpGraph, group: PipelineGroup, workload: StepWorkload) -> GroupTimeline:
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
        end, send, arrive = _event_loop(graph, dur, res, work, latency)
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
    graph: OpGraph, dur: np.ndarray, res: np.ndarray, work: np.ndarray, latency: np.ndarray
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
