"""α–β cost of collectives per algorithm, over one (bottleneck) link type.

Notation: n ranks, S bytes (the full buffer: what all-reduce reduces, what all-gather produces,
what reduce-scatter consumes, what all-to-all sends in total from one rank), B bytes/s per rank and
direction, α one-way latency per step (Thakur, Rabenseifner & Gropp 2005, "Optimization of
collective communication operations in MPICH"; Hockney's α–β model):

- ring:   reduce-scatter / all-gather (n−1)α + (n−1)/n·S/B; all-reduce = RS + AG = 2(n−1)α + 2(n−1)/n·S/B
- tree:   (NCCL double binary tree) all-reduce 2·⌈log2 n⌉α + 2·S/B (pipelined, each rank sends S twice
          at most); RS/AG use the ring (NCCL has no tree RS/AG).
- pat:    recursive doubling / Bruck (Jeaugey 2025, PAT): ⌈log2 n⌉α + (n−1)/n·S/B per RS or AG;
          all-reduce = RS + AG.
- hierarchical: inside each group (building), then across groups on 1/n_inner of the data, then
          inside again (sum of the levels; the levels run the ring).
- all-to-all: (n−1)α + (n−1)/n·S/B (pairwise exchange). p2p: α + S/B.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from ..spec.network import CollectiveAlgorithm


class Collective(StrEnum):
    """Collective operations the cost model uses."""

    ALL_REDUCE = "all_reduce"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_GATHER = "all_gather"


@dataclass(frozen=True)
class Level:
    """One level of a (hierarchical) collective: ``ranks`` over a link of this bandwidth and latency."""

    ranks: int
    bandwidth_bytes_per_s: float
    latency_s: float


def _log2_steps(n: int) -> int:
    return math.ceil(math.log2(n)) if n > 1 else 0


def ring_all_reduce_s(n: int, bytes_: float, bandwidth_bytes_per_s: float, latency_s: float) -> float:
    """Ring all-reduce: 2(n−1)α + 2(n−1)/n·S/B."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) * latency_s + 2 * (n - 1) / n * bytes_ / bandwidth_bytes_per_s


def ring_half_s(n: int, bytes_: float, bandwidth_bytes_per_s: float, latency_s: float) -> float:
    """Ring reduce-scatter or all-gather: (n−1)α + (n−1)/n·S/B."""
    if n <= 1:
        return 0.0
    return (n - 1) * latency_s + (n - 1) / n * bytes_ / bandwidth_bytes_per_s


def tree_all_reduce_s(n: int, bytes_: float, bandwidth_bytes_per_s: float, latency_s: float) -> float:
    """Double-binary-tree all-reduce: 2⌈log2 n⌉α + 2·S/B."""
    if n <= 1:
        return 0.0
    return 2 * _log2_steps(n) * latency_s + 2 * bytes_ / bandwidth_bytes_per_s


def pat_half_s(n: int, bytes_: float, bandwidth_bytes_per_s: float, latency_s: float) -> float:
    """Recursive-doubling / PAT reduce-scatter or all-gather: ⌈log2 n⌉α + (n−1)/n·S/B."""
    if n <= 1:
        return 0.0
    return _log2_steps(n) * latency_s + (n - 1) / n * bytes_ / bandwidth_bytes_per_s


def all_to_all_s(n: int, bytes_: float, bandwidth_bytes_per_s: float, latency_s: float) -> float:
    """Pairwise all-to-all of S bytes per rank: (n−1)α + (n−1)/n·S/B."""
    return ring_half_s(n, bytes_, bandwidth_bytes_per_s, latency_s)


def p2p_s(bytes_: float, bandwidth_bytes_per_s: float, latency_s: float) -> float:
    """Point-to-point transfer: α + S/B."""
    return latency_s + bytes_ / bandwidth_bytes_per_s


def collective_s(
    op: Collective,
    algorithm: CollectiveAlgorithm,
    n: int,
    bytes_: float,
    bandwidth_bytes_per_s: float,
    latency_s: float,
) -> float:
    """Time of one flat collective with ``algorithm`` (hierarchical needs levels: see ``hierarchical_s``)."""
    if algorithm is CollectiveAlgorithm.HIERARCHICAL:
        raise ValueError("hierarchical collectives need two levels; use hierarchical_s")
    half = pat_half_s if algorithm is CollectiveAlgorithm.PAT else ring_half_s
    if op is Collective.ALL_REDUCE:
        if algorithm is CollectiveAlgorithm.RING:
            return ring_all_reduce_s(n, bytes_, bandwidth_bytes_per_s, latency_s)
        if algorithm is CollectiveAlgorithm.TREE:
            return tree_all_reduce_s(n, bytes_, bandwidth_bytes_per_s, latency_s)
        return 2 * half(n, bytes_, bandwidth_bytes_per_s, latency_s)
    return half(n, bytes_, bandwidth_bytes_per_s, latency_s)


def hierarchical_s(op: Collective, inner: Level, outer: Level, bytes_: float) -> float:
    """Two-level collective: inner reduce-scatter, outer op on S/n_inner, inner all-gather (ring levels).

    All-reduce = RS_in(S) + AR_out(S/n_in) + AG_in(S); reduce-scatter = RS_in(S) + RS_out(S/n_in);
    all-gather = AG_out(S/n_in) + AG_in(S).
    """
    shard = bytes_ / inner.ranks
    inner_half = ring_half_s(inner.ranks, bytes_, inner.bandwidth_bytes_per_s, inner.latency_s)
    if op is Collective.ALL_REDUCE:
        outer_t = ring_all_reduce_s(outer.ranks, shard, outer.bandwidth_bytes_per_s, outer.latency_s)
        return 2 * inner_half + outer_t
    return inner_half + ring_half_s(outer.ranks, shard, outer.bandwidth_bytes_per_s, outer.latency_s)
