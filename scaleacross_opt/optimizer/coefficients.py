"""Integer coefficients of the CP-SAT model, precomputed from the cost model.

Each coefficient is the cost model evaluated at one value of the factor it multiplies (a shard
shape, a ZeRO stage, a transport setting), rounded *down* so that the linearised objective stays a
lower bound of what the simulator charges for the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..spec import CollectiveAlgorithm
from .cpsat.variables import Transport
from .space import Shape


@dataclass(frozen=True)
class Coefficients:
    """Cost-model numbers the CP-SAT model multiplies its decision variables by (µs, MiB)."""

    layer_us: dict[tuple[Shape, str], int]  # fwd+bwd per layer per micro-batch on GPU type, incl. exposed TP/CP/EP
    head_us: dict[Shape, int]  # embedding + LM head fwd+bwd per micro-batch on the fastest GPU
    act_mib_per_layer: dict[Shape, float]  # activations kept per layer per micro-batch
    unsharded_mib_per_layer: dict[tuple[Shape, int], float]  # state not sharded over DP, per layer
    sharded_mib_per_layer_pp: dict[int, float]  # DP-sharded state per unit of layers·pp
    capacity_mib: dict[str, int]  # usable HBM per GPU per building after fixed overhead/fragmentation
    grad_kib_per_layer: dict[Shape, int]  # gradient bytes each GPU syncs per layer
    intra_us_per_mib: dict[Transport, float]  # DP sync per MiB per GPU inside a building (bandwidth part)
    intra_hop_us: int  # one point-to-point hop inside a building
    cross_us_per_mib: dict[Transport, float]  # per MiB of the whole gradient over the best cross route
    cross_hop_us: dict[Transport, int]  # one-way latency of the shortest cross-building route
    cross_algorithm_steps: dict[CollectiveAlgorithm, str]  # how latency steps grow: 'linear', 'log', 'buildings'
    model_grad_mib: float  # gradient bytes of one full replica
    pp_link_mib_per_chunk: float  # activation + gradient MiB crossing one boundary per step, per virtual chunk
    optimizer_us_per_layer_pp: dict[str, float]  # optimizer step per unit of layers·pp on this building's GPU
