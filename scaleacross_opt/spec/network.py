"""Network-layer technology choices, one set per traffic class.

The option names are the registry keys; their cost effects live in ``scaleacross_opt.cost.network``
and their parameters in ``scaleacross_opt.catalog.network``.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from . import bounds as B
from .base import StrictModel


class CollectiveAlgorithm(StrEnum):
    """How a collective is decomposed into point-to-point steps."""

    RING = "ring"
    TREE = "tree"
    PAT = "pat"  # recursive doubling / Bruck-like, log2(n) steps, farthest-first
    HIERARCHICAL = "hierarchical"  # inside each building, then across, then inside again


class LoadBalancing(StrEnum):
    """How flows are spread over the equal-cost paths of a fabric."""

    ECMP = "ecmp"
    PACKET_SPRAYING = "packet_spraying"


class CongestionControl(StrEnum):
    """Rate control of RDMA flows."""

    DCQCN = "dcqcn"
    RECEIVER_DRIVEN = "receiver_driven"


class LossRecovery(StrEnum):
    """What the transport resends after a loss."""

    GO_BACK_N = "go_back_n"
    SELECTIVE_REPEAT = "selective_repeat"


class TrafficClass(StrEnum):
    """Network traffic classes that carry their own settings (NVLink inside a node has none)."""

    INTRA_BUILDING = "intra_building"
    CROSS_BUILDING = "cross_building"


class TrafficClassConfig(StrictModel):
    """Transport settings for one traffic class."""

    collective_algorithm: CollectiveAlgorithm = Field(
        description="Algorithm for DP/CP collectives on this class."
    )
    load_balancing: LoadBalancing = Field(description="Path selection for this class's flows.")
    congestion_control: CongestionControl = Field(description="Congestion control for this class.")
    loss_recovery: LossRecovery = Field(description="Retransmission scheme for this class.")
    qps_per_connection: int = Field(ge=1, le=B.MAX_QPS, description="Queue pairs (flows) per connection (≤ 256).")
    window_kib_per_qp: int = Field(
        ge=1, le=B.MAX_WINDOW_KIB,
        description="Outstanding bytes allowed per QP, KiB (caps rate at window/RTT; ≤ 2^20 KiB = 1 GiB).",
    )


class NetworkConfig(StrictModel):
    """Transport settings per traffic class."""

    intra_building: TrafficClassConfig = Field(description="Settings inside one building's fabric.")
    cross_building: TrafficClassConfig = Field(description="Settings on links between buildings.")

    def for_class(self, traffic_class: TrafficClass) -> TrafficClassConfig:
        """The settings of one traffic class."""
        return getattr(self, traffic_class.value)
