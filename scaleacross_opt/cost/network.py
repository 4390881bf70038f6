"""Network layer: effective bandwidth and latency of a path for one traffic class's settings.

effective rate per connection = min(fair share × load balance × congestion control × loss recovery,
window cap), where

- fair share = bandwidth ÷ concurrent connections (oversubscription is already in the bandwidth);
- load balance (ECMP): F = connections × QPs flows hash onto P paths; a synchronised transfer ends
  when the most loaded path drains, so efficiency = F / (P · E[max flows on a path]), capped at 1
  (balls into bins; Gangidi et al., SIGCOMM'24: imbalance > 1.2 over 16 links, QP scaling helps).
  Packet spraying reaches ~ideal (``SPRAYING_EFFICIENCY``) but reorders packets, which go-back-N
  treats as loss (``SPRAYING_REORDER_FRACTION`` is added to the loss rate);
- congestion control: DCQCN 1 / (1 + RTT / RTT½) (rate recovery lags feedback by an RTT; Zhu et al.
  CoNEXT'16); receiver-driven admission a constant (Gangidi et al. 2024: DCQCN off at 400G);
- loss recovery (Bertsekas & Gallager, "Data Networks", §2.4 ARQ efficiency): go-back-N resends the
  window W (packets in flight) per loss: goodput (1 − p) / (1 + p·W); selective repeat (1 − p);
- window cap: QPs × window bytes ÷ RTT (a window below the bandwidth-delay product limits the rate).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..catalog import coefficients as co
from ..spec.network import CongestionControl, LoadBalancing, LossRecovery, TrafficClassConfig


@dataclass(frozen=True)
class EffectivePath:
    """What one connection gets from a path: goodput and one-way latency."""

    bandwidth_gbps: float
    latency_us: float

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """Goodput in bytes per second."""
        return self.bandwidth_gbps * 1e9 / 8

    @property
    def latency_s(self) -> float:
        """One-way latency in seconds."""
        return self.latency_us * 1e-6


EXACT_MAX_LOAD_FLOWS = 4096  # above this many flows the binomial is treated as Gaussian


@functools.lru_cache(maxsize=256)
def expected_max_standard_normal(count: int) -> float:
    """E[max of ``count`` iid N(0, 1)] = ∫ x·n·φ(x)·Φ(x)^(n−1) dx (numerical quadrature)."""
    x = np.linspace(-10.0, 10.0, 20001)
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    cdf = np.cumsum(pdf) * (x[1] - x[0])
    density = count * pdf * np.clip(cdf, 0.0, 1.0) ** (count - 1)
    return float(np.sum(x * density) * (x[1] - x[0]))


@functools.lru_cache(maxsize=4096)
def expected_max_load(flows: int, paths: int) -> float:
    """E[max flows on one path] when ``flows`` hash uniformly onto ``paths`` (balls into bins).

    Uses P(max ≤ k) ≈ P(Bin(F, 1/P) ≤ k)^P (bins treated as independent), exact for P = 1, and
    never below the mean F/P nor below 1 (a flow's own path carries at least that flow). Beyond
    EXACT_MAX_LOAD_FLOWS flows each bin's load is ≈ N(μ, σ²) (μ = F/P, σ² = F/P·(1 − 1/P)) and
    E[max] ≈ μ + σ·E[max of P standard normals] (heavily loaded balls into bins).
    """
    if paths <= 1 or flows <= 0:
        return float(max(flows, 0))
    q = 1.0 / paths
    if flows > EXACT_MAX_LOAD_FLOWS:
        return flows * q + math.sqrt(flows * q * (1.0 - q)) * expected_max_standard_normal(paths)
    pmf = (1.0 - q) ** flows  # P(Bin = 0)
    cdf = pmf
    expected = 0.0
    for k in range(flows):
        expected += 1.0 - min(1.0, cdf) ** paths  # P(max > k)
        pmf *= (flows - k) / (k + 1) * q / (1.0 - q)
        cdf += pmf
        if 1.0 - cdf < 1e-12:
            break
    return max(expected, flows * q, 1.0)


def load_balance_efficiency(config: TrafficClassConfig, concurrent_flows: int, parallel_paths: int) -> float:
    """Mean path load ÷ max path load for ECMP (≤ 1); ``SPRAYING_EFFICIENCY`` for packet spraying."""
    if config.load_balancing is LoadBalancing.PACKET_SPRAYING:
        return co.SPRAYING_EFFICIENCY
    flows = max(1, concurrent_flows) * config.qps_per_connection
    if parallel_paths <= 1:
        return 1.0
    return min(1.0, flows / (parallel_paths * expected_max_load(flows, parallel_paths)))


def congestion_control_efficiency(config: TrafficClassConfig, rtt_us: float) -> float:
    """DCQCN: 1 / (1 + RTT / RTT½); receiver-driven admission: constant."""
    if config.congestion_control is CongestionControl.DCQCN:
        return 1.0 / (1.0 + rtt_us / co.DCQCN_HALF_EFFICIENCY_RTT_US)
    return co.RECEIVER_DRIVEN_EFFICIENCY


def loss_recovery_efficiency(config: TrafficClassConfig, loss_rate: float, window_packets: float) -> float:
    """Go-back-N (1 − p)/(1 + p·W), selective repeat (1 − p); p includes spraying reorders for go-back-N."""
    if config.loss_recovery is LossRecovery.SELECTIVE_REPEAT:
        return 1.0 - loss_rate
    p = loss_rate
    if config.load_balancing is LoadBalancing.PACKET_SPRAYING:
        p = 1.0 - (1.0 - p) * (1.0 - co.SPRAYING_REORDER_FRACTION)
    return (1.0 - p) / (1.0 + p * max(1.0, window_packets))


def effective_path(
    bandwidth_gbps: float,
    latency_us: float,
    loss_rate: float,
    config: TrafficClassConfig,
    concurrent_flows: int,
    parallel_paths: int,
) -> EffectivePath:
    """Goodput and latency one of ``concurrent_flows`` connections sharing a path of ``bandwidth_gbps``.

    ``bandwidth_gbps`` is the path's aggregate capacity per direction, ``parallel_paths`` the equal-cost
    links it is made of. The window in flight per QP is min(window, BDP of the connection's share).
    """
    if math.isinf(bandwidth_gbps):
        return EffectivePath(bandwidth_gbps, latency_us)
    flows = max(1, concurrent_flows)
    share_gbps = bandwidth_gbps / flows
    rtt_us = 2.0 * latency_us
    window_bytes = config.window_kib_per_qp * 1024.0
    bdp_per_qp_bytes = share_gbps * 1e9 / 8 * rtt_us * 1e-6 / config.qps_per_connection
    window_packets = min(window_bytes, bdp_per_qp_bytes) / co.MTU_BYTES
    goodput = (
        share_gbps
        * load_balance_efficiency(config, flows, parallel_paths)
        * congestion_control_efficiency(config, rtt_us)
        * loss_recovery_efficiency(config, loss_rate, window_packets)
    )
    window_cap_gbps = (
        config.qps_per_connection * window_bytes * 8 / (rtt_us * 1e-6) / 1e9 if rtt_us > 0 else math.inf
    )
    return EffectivePath(min(goodput, window_cap_gbps), latency_us)
