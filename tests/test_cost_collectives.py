"""α–β collective models: pinned closed forms and latency behaviour."""

from __future__ import annotations

import math

import pytest

from scaleacross_opt.cost.collectives import (
    Collective,
    Level,
    all_to_all_s,
    collective_s,
    hierarchical_s,
    p2p_s,
    pat_half_s,
    ring_all_reduce_s,
    ring_half_s,
    tree_all_reduce_s,
)
from scaleacross_opt.spec.network import CollectiveAlgorithm


def test_ring_all_reduce_pinned() -> None:
    # 2(n−1)α + 2(n−1)/n·S/B with n=8, S=1 GB, B=10 GB/s, α=10 µs
    assert ring_all_reduce_s(8, 1e9, 1e10, 1e-5) == pytest.approx(14e-5 + 0.175)


def test_half_collectives_and_p2p_pinned() -> None:
    assert ring_half_s(4, 4e6, 1e9, 1e-6) == pytest.approx(3e-6 + 3e-3)
    assert pat_half_s(1024, 1024.0, 1e9, 1e-3) == pytest.approx(10e-3 + 1023 / 1024 * 1024 / 1e9)
    assert tree_all_reduce_s(16, 1e6, 1e9, 1e-5) == pytest.approx(8e-5 + 2e-3)
    assert all_to_all_s(8, 8e6, 1e9, 0.0) == pytest.approx(7e-3)
    assert p2p_s(1e6, 1e9, 5e-6) == pytest.approx(1.005e-3)


def test_single_rank_is_free() -> None:
    for algorithm in (CollectiveAlgorithm.RING, CollectiveAlgorithm.TREE, CollectiveAlgorithm.PAT):
        assert collective_s(Collective.ALL_REDUCE, algorithm, 1, 1e9, 1e9, 1e-3) == 0.0


def test_pat_all_reduce_is_rs_plus_ag() -> None:
    args = (64, 1e8, 1e10, 1e-4)
    total = collective_s(Collective.ALL_REDUCE, CollectiveAlgorithm.PAT, *args)
    assert total == pytest.approx(2 * pat_half_s(*args))
    # same bandwidth term as the ring, log2 latency steps instead of n−1
    assert total < ring_all_reduce_s(*args)


def test_ring_across_buildings_is_latency_bound_for_small_messages() -> None:
    latency = 1e-3  # 1 ms one-way (metro)
    small = 1e6
    ring = ring_all_reduce_s(64, small, 5e9, latency)
    assert ring > 0.9 * 2 * 63 * latency  # latency dominates
    pat = collective_s(Collective.ALL_REDUCE, CollectiveAlgorithm.PAT, 64, small, 5e9, latency)
    assert pat < ring / 5


def test_hierarchical_is_sum_of_levels() -> None:
    inner, outer = Level(8, 5e10, 1e-5), Level(4, 5e9, 1e-3)
    size = 1e9
    expected = 2 * ring_half_s(8, size, 5e10, 1e-5) + ring_all_reduce_s(4, size / 8, 5e9, 1e-3)
    assert hierarchical_s(Collective.ALL_REDUCE, inner, outer, size) == pytest.approx(expected)
    rs = hierarchical_s(Collective.REDUCE_SCATTER, inner, outer, size)
    assert rs == pytest.approx(ring_half_s(8, size, 5e10, 1e-5) + ring_half_s(4, size / 8, 5e9, 1e-3))
    # flat ring over the slow link with all 32 ranks pays 62 slow latency steps
    flat = ring_all_reduce_s(32, size, 5e9, 1e-3)
    assert hierarchical_s(Collective.ALL_REDUCE, inner, outer, size) < flat


def test_hierarchical_needs_levels() -> None:
    with pytest.raises(ValueError):
        collective_s(Collective.ALL_REDUCE, CollectiveAlgorithm.HIERARCHICAL, 8, 1.0, 1.0, 0.0)
    assert math.isfinite(ring_half_s(2, 1.0, 1.0, 0.0))
