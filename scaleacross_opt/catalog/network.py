"""Network-layer defaults per traffic class (what a cluster runs when nobody tunes it).

The cost effects of each option (ECMP collisions, DCQCN at long RTT, go-back-N under loss) live in
``cost.network``; their fitted parameters live in ``catalog.coefficients``.
"""

from __future__ import annotations

from ..spec.network import (
    CollectiveAlgorithm,
    CongestionControl,
    LoadBalancing,
    LossRecovery,
    NetworkConfig,
    TrafficClassConfig,
)

# NCCL defaults: NCCL_ALGO ring for large messages, NCCL_IB_QPS_PER_CONNECTION=1, NCCL_BUFFSIZE=4 MiB
# (NCCL environment-variable documentation). RoCE NICs default to DCQCN and go-back-N
# (Gangidi et al., SIGCOMM'24, "RDMA over Ethernet for Distributed AI Training at Meta Scale").
DEFAULT_TRAFFIC_CLASS = TrafficClassConfig(
    collective_algorithm=CollectiveAlgorithm.RING,
    load_balancing=LoadBalancing.ECMP,
    congestion_control=CongestionControl.DCQCN,
    loss_recovery=LossRecovery.GO_BACK_N,
    qps_per_connection=1,
    window_kib_per_qp=4096,
)

DEFAULT_NETWORK = NetworkConfig(intra_building=DEFAULT_TRAFFIC_CLASS, cross_building=DEFAULT_TRAFFIC_CLASS)

# Values the optimizer considers for the numeric knobs when the instance does not restrict them.
# QP scaling up to 16x is what Meta deployed for LLM traffic (Gangidi et al. 2024 §5).
QPS_CHOICES: tuple[int, ...] = (1, 4, 16)
# 4 MiB is NCCL's default buffer; Meta's cross-building tuning raises outstanding data with
# distance (Si et al., arXiv 2510.20171); 64 MiB covers 400 Gb/s x ~1 ms.
WINDOW_KIB_CHOICES: tuple[int, ...] = (4096, 16384, 65536)
