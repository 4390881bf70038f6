"""Network layer: each documented behaviour of effective_path."""

from __future__ import annotations

import itertools

import pytest

from scaleacross_opt.cost.network import effective_path, expected_max_load, load_balance_efficiency
from scaleacross_opt.spec.network import (
    CollectiveAlgorithm,
    CongestionControl,
    LoadBalancing,
    LossRecovery,
    TrafficClassConfig,
)


def cfg(**changes: object) -> TrafficClassConfig:
    base = {
        "collective_algorithm": CollectiveAlgorithm.RING,
        "load_balancing": LoadBalancing.ECMP,
        "congestion_control": CongestionControl.DCQCN,
        "loss_recovery": LossRecovery.GO_BACK_N,
        "qps_per_connection": 1,
        "window_kib_per_qp": 1 << 20,
    }
    return TrafficClassConfig(**{**base, **changes})


def bw(config: TrafficClassConfig, loss: float = 0.0, latency_us: float = 10.0, flows: int = 64) -> float:
    return effective_path(400.0 * 16, latency_us, loss, config, flows, 16).bandwidth_gbps


def test_expected_max_load() -> None:
    assert expected_max_load(1, 16) == 1.0
    assert expected_max_load(10, 1) == 10.0
    assert expected_max_load(256, 16) > 16 * 1.2  # imbalance > 1.2 over 16 links (Gangidi et al.)


@pytest.mark.parametrize("recovery", [LossRecovery.GO_BACK_N, LossRecovery.SELECTIVE_REPEAT])
def test_loss_up_bandwidth_down(recovery: LossRecovery) -> None:
    values = [bw(cfg(loss_recovery=recovery), loss=p, latency_us=500) for p in (0.0, 1e-5, 1e-4, 1e-3, 1e-2)]
    assert all(a > b for a, b in itertools.pairwise(values))


def test_go_back_n_collapses_when_loss_times_window_large() -> None:
    sr = bw(cfg(loss_recovery=LossRecovery.SELECTIVE_REPEAT), loss=1e-3, latency_us=5000)
    gbn = bw(cfg(loss_recovery=LossRecovery.GO_BACK_N), loss=1e-3, latency_us=5000)
    assert sr == pytest.approx(bw(cfg(loss_recovery=LossRecovery.SELECTIVE_REPEAT), latency_us=5000) * 0.999)
    assert gbn < 0.5 * sr


def test_rtt_up_dcqcn_down_receiver_driven_flat() -> None:
    dcqcn = [bw(cfg(), latency_us=lat) for lat in (5, 50, 500, 5000)]
    assert all(a > b for a, b in itertools.pairwise(dcqcn))
    rd = [bw(cfg(congestion_control=CongestionControl.RECEIVER_DRIVEN), latency_us=lat) for lat in (5, 50, 500, 5000)]
    assert max(rd) == pytest.approx(min(rd))


def test_qp_scaling_helps_ecmp_up_to_ideal() -> None:
    values = [load_balance_efficiency(cfg(qps_per_connection=q), 16, 16) for q in (1, 4, 16, 64)]
    assert all(a < b for a, b in itertools.pairwise(values))
    assert values[-1] <= 1.0
    spray = load_balance_efficiency(cfg(load_balancing=LoadBalancing.PACKET_SPRAYING), 16, 16)
    assert spray > values[-1]


def test_spraying_with_go_back_n_penalised() -> None:
    spray_gbn = cfg(load_balancing=LoadBalancing.PACKET_SPRAYING, loss_recovery=LossRecovery.GO_BACK_N)
    spray_sr = cfg(load_balancing=LoadBalancing.PACKET_SPRAYING, loss_recovery=LossRecovery.SELECTIVE_REPEAT)
    assert bw(spray_gbn, loss=1e-4, latency_us=100) < bw(spray_sr, loss=1e-4, latency_us=100)
    assert bw(spray_gbn, loss=0.0, latency_us=100) < bw(spray_sr, loss=0.0, latency_us=100)  # reorders


def test_window_cap_at_long_rtt() -> None:
    small = cfg(window_kib_per_qp=1024, congestion_control=CongestionControl.RECEIVER_DRIVEN)
    path = effective_path(400.0, 25_000.0, 0.0, small, 1, 1)  # 50 ms RTT
    assert path.bandwidth_gbps == pytest.approx(1024 * 1024 * 8 / 0.05 / 1e9)
    more_qps = effective_path(400.0, 25_000.0, 0.0, cfg(window_kib_per_qp=1024, qps_per_connection=4,
                              congestion_control=CongestionControl.RECEIVER_DRIVEN), 1, 1)
    assert more_qps.bandwidth_gbps == pytest.approx(4 * path.bandwidth_gbps)
    assert path.latency_us == 25_000.0


def test_fair_share_of_concurrent_flows() -> None:
    sprayed = cfg(load_balancing=LoadBalancing.PACKET_SPRAYING, loss_recovery=LossRecovery.SELECTIVE_REPEAT)
    one = effective_path(800.0, 10.0, 0.0, sprayed, 1, 16)
    eight = effective_path(800.0, 10.0, 0.0, sprayed, 8, 16)
    assert eight.bandwidth_gbps == pytest.approx(one.bandwidth_gbps / 8)
