"""Predict every published collective measurement in data/collectives.csv with the cost model's levels.

Run: ``python benchmarks/validate_collectives.py`` (from the repository root). Prints one row per
measurement (predicted vs measured bus bandwidth, % error), the skipped rows with why, and LAST the
median absolute % error over the rows the model covers.

Each row becomes one group: ``gpus_per_node`` members per NVLink domain (a node) on ``num_nodes``
nodes of one building, every GPU with ``nic_gbps_per_gpu`` of NIC, on the network settings of its
fabric technology (``transport``; nothing is fitted to a row). Levels come from the
same functions the step model uses (``nvlink_path``, ``fabric_path``), the time from
``span_collective_s``; bus bandwidth = algorithm bandwidth × 2(n−1)/n (all-reduce) or (n−1)/n
(all-gather, reduce-scatter, all-to-all), as nccl-tests reports it; sendrecv = algorithm bandwidth.
NVLS rows inside one node: ``nvls_all_reduce_s`` at the NVLink rate × the GPU's NVLS efficiency
(``NVLS_EFFICIENCY``). Algorithm "unknown" is what NCCL's tuner picks, the fastest it has: a ring, or for
an all-reduce inside one NVSwitch node of a GPU with NVLS, NVLS when faster.
Skipped, with the reason printed: NVLSTree rows (NVLS inside nodes, a tree across them: not modelled),
GPUs not in the catalog, rows with NICs but no NIC bandwidth. Rows whose bus bandwidth exceeds what a
ring can reach (the node's NIC aggregate) are compared and flagged: NCCL used a tree-type algorithm
there, which the model does not price.
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

from scaleacross_opt.catalog import coefficients as co
from scaleacross_opt.catalog.gpus import gpu_by_name
from scaleacross_opt.catalog.network import DEFAULT_TRAFFIC_CLASS
from scaleacross_opt.cost.collectives import Collective, Level, nvls_all_reduce_s, p2p_s, span_collective_s
from scaleacross_opt.cost.step import fabric_path, nvlink_path
from scaleacross_opt.errors import InputError
from scaleacross_opt.spec import (
    Building,
    CollectiveAlgorithm,
    CongestionControl,
    GpuSpec,
    LoadBalancing,
    LossRecovery,
    TrafficClassConfig,
)

DATA = Path(__file__).parent / "data" / "collectives.csv"
OPS = {"all_reduce": Collective.ALL_REDUCE, "all_gather": Collective.ALL_GATHER,
       "reduce_scatter": Collective.REDUCE_SCATTER, "all_to_all": Collective.ALL_TO_ALL}
ALGORITHMS = {"ring": CollectiveAlgorithm.RING, "unknown": CollectiveAlgorithm.RING,
              "tree": CollectiveAlgorithm.TREE, "pat": CollectiveAlgorithm.PAT}


def _bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw ÷ algbw."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    return 1.0 if op == "sendrecv" else (n - 1) / n


def transport(interconnect: str) -> TrafficClassConfig:
    """Network settings of a fabric technology (the same mapping as validate_published.py): InfiniBand
    (adaptive routing, credit-based flow control) and EFA (SRD: per-packet multipath, selective
    retransmission) → packet spraying + receiver-driven + selective repeat; RoCE → Meta's ECMP with 16
    QPs per connection (Gangidi et al. 2024); anything else → the catalog defaults."""
    if interconnect.startswith(("IB", "EFA")):
        return TrafficClassConfig(collective_algorithm=CollectiveAlgorithm.RING,
                                  load_balancing=LoadBalancing.PACKET_SPRAYING,
                                  congestion_control=CongestionControl.RECEIVER_DRIVEN,
                                  loss_recovery=LossRecovery.SELECTIVE_REPEAT, qps_per_connection=1,
                                  window_kib_per_qp=DEFAULT_TRAFFIC_CLASS.window_kib_per_qp)
    if "RoCE" in interconnect:
        return DEFAULT_TRAFFIC_CLASS.model_copy(update={"qps_per_connection": 16})
    return DEFAULT_TRAFFIC_CLASS


def predict_busbw(row: dict[str, str]) -> float | str:
    """Predicted bus bandwidth (GB/s) of one row, or why it is skipped."""
    try:
        gpu = gpu_by_name(row["gpu"])
    except (InputError, KeyError, ValueError):
        return f"GPU {row['gpu']!r} not in the catalog"
    nodes, per_node = int(row["num_nodes"]), int(row["gpus_per_node"])
    nvls = row["collective"] == "all_reduce" and nodes == 1 and gpu.name in co.NVLS_EFFICIENCY
    if row["algorithm"] == "nvls" and not nvls:
        return "NVLSTree (NVLS inside nodes, a tree across them) not modelled"
    if nodes > 1 and not row["nic_gbps_per_gpu"]:
        return "NIC bandwidth not stated"
    nic = float(row["nic_gbps_per_gpu"] or gpu.nic_bandwidth_gbps)
    spec = GpuSpec(**{**gpu.model_dump(), "nic_bandwidth_gbps": nic, "nvlink_domain_size": per_node})
    building = Building(name="b", gpu=spec, num_gpus=nodes * per_node, gpus_per_node=per_node)
    nvlink, fabric = nvlink_path(building), fabric_path(building, transport(row["interconnect"]))
    levels = [Level(per_node, nvlink.bandwidth_bytes_per_s, nvlink.latency_s),
              Level(nodes, per_node * fabric.bandwidth_bytes_per_s, fabric.latency_s)]
    n = nodes * per_node
    size = float(row["message_bytes"])
    times = []
    if row["collective"] == "sendrecv":
        level = levels[1] if nodes > 1 else levels[0]
        times.append(p2p_s(size, level.bandwidth_bytes_per_s / (per_node if nodes > 1 else 1), level.latency_s))
    elif row["algorithm"] != "nvls":
        times.append(span_collective_s(OPS[row["collective"]], ALGORITHMS[row["algorithm"]], levels, size))
    if nvls and row["algorithm"] in ("nvls", "unknown"):
        switch = nvlink.bandwidth_bytes_per_s * co.NVLS_EFFICIENCY[gpu.name]
        times.append(nvls_all_reduce_s(n, size, switch, co.NVLS_LATENCY_US * 1e-6))
    return size / min(times) * _bus_factor(row["collective"], n) / 1e9


def above_ring(row: dict[str, str]) -> bool:
    """Whether the measured bus bandwidth exceeds the node's NIC aggregate, which bounds a ring's."""
    nic = row["nic_gbps_per_gpu"]
    if int(row["num_nodes"]) < 2 or not nic or row["collective"] != "all_reduce":
        return False
    return float(row["busbw_gb_per_s"]) > int(row["gpus_per_node"]) * float(nic) / 8


def main() -> int:
    """Print the comparison; the last line is the median absolute % error."""
    errors: list[float] = []
    skipped: list[str] = []
    print(f"{'gpu':16} {'nodes×gpn':>9} {'collective':14} {'algo':7} {'bytes':>12} {'measured':>9} {'model':>9} "
          f"{'err':>7}")
    with DATA.open(newline="") as handle:
        for i, row in enumerate(csv.DictReader(handle), start=2):
            predicted = predict_busbw(row)
            if isinstance(predicted, str):
                skipped.append(f"line {i}: {row['gpu']} {row['collective']} {row['algorithm']}: {predicted}")
                continue
            measured = float(row["busbw_gb_per_s"])
            error = (predicted - measured) / measured * 100
            errors.append(abs(error))
            shape = f"{row['num_nodes']}×{row['gpus_per_node']}"
            flag = "  busbw > node NICs: NCCL used a tree, not modelled" if above_ring(row) else ""
            print(f"{row['gpu'][:16]:16} {shape:>9} {row['collective']:14} {row['algorithm']:7} "
                  f"{int(row['message_bytes']):>12} {measured:9.1f} {predicted:9.1f} {error:+6.1f}%{flag}")
    print(f"\nskipped {len(skipped)} rows:")
    for line in skipped:
        print("  " + line)
    if not errors:
        print("no row could be predicted")
        return 1
    print(f"\nrows compared: {len(errors)}; within 10 %: {sum(e <= 10 for e in errors)}; "
          f"p90 {statistics.quantiles(errors, n=10)[-1]:.1f} %")
    print(f"median absolute bus-bandwidth error: {statistics.median(errors):.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
