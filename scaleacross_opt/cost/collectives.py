"""α–β cost of collectives over a group that spans levels of the topology.

Notation: n ranks, S bytes (the full buffer: what all-reduce reduces, what all-gather produces,
what reduce-scatter consumes, what all-to-all sends in total from one rank), B bytes/s, α one-way
latency per step (Thakur, Rabenseifner & Gropp 2005, "Optimization of collective communication
operations in MPICH"; Hockney's α–β model).

A group's span is a list of ``Level``s, inner to outer: members per NVLink domain, domains per
building (the scale-out fabric), buildings (the cross-building route). ``Level.bandwidth`` is what
the group has where its traffic crosses that level's boundary, summed over the members inside one
part (NCCL runs one channel per NIC and spreads a ring's crossing edges over them, so a multi-node
ring's bus bandwidth is the node's aggregate NIC bandwidth — nccl-tests issues 290 and 119 — not
one NIC's). A ring carries its whole per-edge volume across every boundary it crosses, so a flat
collective runs at the slowest crossed level:

- ring:   reduce-scatter / all-gather (n−1)α + (n−1)/n·S/B; all-reduce = RS + AG = 2(n−1)α + 2(n−1)/n·S/B
- tree:   (NCCL double binary tree) all-reduce 2·⌈log2 n⌉α + 2·S/B (pipelined, each rank sends S twice
          at most); RS/AG use the ring (NCCL has no tree RS/AG).
- pat:    recursive doubling / Bruck (Jeaugey 2025, PAT): ⌈log2 n⌉α + (n−1)/n·S/B per RS or AG;
          all-reduce = RS + AG.
- hierarchical: a ring inside the outermost part (every inner level flattened) on S, the outer ring
          on S/n_in per member — each member gets 1/n_in of the part's outer bandwidth — then the
          inner ring again: AR = 2·RS_in(S) + AR_out(S/n_in); RS = RS_in(S) + RS_out(S/n_in);
          AG = AG_out(S/n_in) + AG_in(S).
- all-to-all: each member sends (n−1)/n·S; the share for peers outside a level's part,
          (n − members per part)/n·S, crosses that level at 1/members of its bandwidth; all peers
          are posted at once (grouped send/recv), so one α of the farthest level is paid.
- nvls (NVLink SHARP, all-reduce inside one NVSwitch domain): α + (n+1)/n·S/B — see
          ``nvls_all_reduce_s``.
- p2p: α + S/B.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from ..spec.network import CollectiveAlgorithm


class Collective(StrEnum):
    """Collective operations the cost model uses."""

    ALL_REDUCE = "all_reduce"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_GATHER = "all_gather"
    ALL_TO_ALL = "all_to_all"


@dataclass(frozen=True)
class Level:
    """One level of a group's span: ``ranks`` parts joined at this level, ``bandwidth_bytes_per_s`` per
    part boundary (per direction, summed over the part's members), ``latency_s`` one way per step."""

    ranks: int
    bandwidth_bytes_per_s: float
    latency_s: float


def _log2_steps(n: int) -> int:
    return math.ceil(math.log2(n)) if n > 1 else 0


def ring_half_s(n: int, bytes_: float, bandwidth_bytes_per_s: float, latency_s: float) -> float:
    """Ring reduce-scatter or all-gather: (n−1)α + (n−1)/n·S/B."""
    if n <= 1:
        return 0.0
    return (n - 1) * latency_s + (n - 1) / n * bytes_ / bandwidth_bytes_per_s


def p2p_s(bytes_: float, bandwidth_bytes_per_s: float, latency_s: float) -> float:
    """Point-to-point transfer: α + S/B."""
    return latency_s + bytes_ / bandwidth_bytes_per_s


def nvls_all_reduce_s(n: int, bytes_: float, bandwidth_bytes_per_s: float, latency_s: float) -> float:
    """NVLink SHARP all-reduce of ``n`` GPUs on one NVSwitch: α + (n+1)/n·S/B.

    The switch reduces (multimem.ld_reduce): it reads every GPU's shard for the GPU that owns it, so each
    GPU's link carries S out and its reduced S/n in; then each GPU stores its shard to the multicast
    address and the switch replicates it: S/n out, S in. NCCL pipelines the two phases, so each direction
    carries (n+1)/n·S, against 2(n−1)/n·S for a ring; B is the switch's reduction rate.
    """
    if n <= 1 or bytes_ <= 0:
        return 0.0
    return latency_s + (n + 1) / n * bytes_ / bandwidth_bytes_per_s


def flat_collective_s(
    op: Collective, algorithm: CollectiveAlgorithm, n: int, bytes_: float, bandwidth_bytes_per_s: float,
    latency_s: float,
) -> float:
    """One collective over ``n`` ranks on one bottleneck bandwidth and per-step latency."""
    if n <= 1 or bytes_ <= 0:
        return 0.0
    if op is Collective.ALL_TO_ALL:
        return latency_s + (n - 1) / n * bytes_ / bandwidth_bytes_per_s
    steps = _log2_steps(n) if algorithm is CollectiveAlgorithm.PAT else n - 1
    half = steps * latency_s + (n - 1) / n * bytes_ / bandwidth_bytes_per_s
    if op is not Collective.ALL_REDUCE:
        return half
    if algorithm is CollectiveAlgorithm.TREE:
        return 2 * _log2_steps(n) * latency_s + 2 * bytes_ / bandwidth_bytes_per_s
    return 2 * half


def _crossed(levels: Sequence[Level]) -> list[Level]:
    return [level for level in levels if level.ranks > 1]


def group_size(levels: Sequence[Level]) -> int:
    """Ranks of the group: the product of every level's parts."""
    return math.prod(level.ranks for level in levels)


def _all_to_all_bandwidth_s(levels: Sequence[Level], n: int, bytes_: float) -> float:
    """Bandwidth part of an all-to-all: the innermost level (NVLink) carries the share for peers in the
    member's own part, level i ≥ 1 everything for peers outside the member's level-(i−1) part, at
    1/(members of that part) of its bandwidth; the slowest level decides."""
    worst, inside = 0.0, 1
    for i, level in enumerate(levels):
        outside = inside * level.ranks
        share = (outside - 1) / n if i == 0 else (n - inside) / n
        if level.ranks > 1:
            worst = max(worst, share * bytes_ * inside / level.bandwidth_bytes_per_s)
        inside = outside
    return worst


def span_collective_s(op: Collective, algorithm: CollectiveAlgorithm, levels: Sequence[Level], bytes_: float,
                      ranks: int | None = None) -> float:
    """Time of ``op`` on ``bytes_`` over a group spanning ``levels`` (inner to outer) with ``algorithm``.

    Flat algorithms (ring, tree, PAT) run at the slowest crossed level's bandwidth and the farthest
    level's latency; hierarchical splits off the outermost crossed level (see the module docstring).
    All-to-all charges each level the bytes that leave its parts (``_all_to_all_bandwidth_s``).
    ``ranks``: the group's members where fewer than the levels' product (a group spread unevenly over
    buildings: its levels count the fullest building's domains in each; a ring over 48 members of 32 + 16
    takes 47 steps, not 63).
    """
    crossed = _crossed(levels)
    n = group_size(levels) if ranks is None else ranks
    if n <= 1 or bytes_ <= 0:
        return 0.0
    if op is Collective.ALL_TO_ALL:
        return max(level.latency_s for level in crossed) + _all_to_all_bandwidth_s(levels, n, bytes_)
    bandwidth = min(level.bandwidth_bytes_per_s for level in crossed)
    latency = max(level.latency_s for level in crossed)
    if algorithm is not CollectiveAlgorithm.HIERARCHICAL or len(crossed) < 2:
        flat = CollectiveAlgorithm.RING if algorithm is CollectiveAlgorithm.HIERARCHICAL else algorithm
        return flat_collective_s(op, flat, n, bytes_, bandwidth, latency)
    outer, inner = crossed[-1], crossed[:-1]
    n_in = group_size(inner)
    inner_bw = min(level.bandwidth_bytes_per_s for level in inner)
    inner_lat = max(level.latency_s for level in inner)
    inner_half = ring_half_s(n_in, bytes_, inner_bw, inner_lat)
    outer_bw = outer.bandwidth_bytes_per_s / n_in
    outer_half = ring_half_s(outer.ranks, bytes_ / n_in, outer_bw, outer.latency_s)
    if op is Collective.ALL_REDUCE:
        return 2 * inner_half + 2 * outer_half
    return inner_half + outer_half
