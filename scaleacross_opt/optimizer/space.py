"""The design space: every choice the optimizer makes, as explicit option lists.

The CP-SAT model, the exhaustive enumerator and the baselines all draw their options from a
``DesignSpace``, so they search the same space. Options honour the instance's ``search`` section and
the hard structural rules (TP inside NVLink, heads divisible by TP, CP dividing the sequence, EP
dividing the experts). Joint rules (degree product = GPUs, batch divisibility, memory, capacity) are
constraints of the model, not filters here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

from ..catalog.network import QPS_CHOICES, WINDOW_KIB_CHOICES
from ..cost.step import default_dp_bucket_params, sizes_dp_buckets
from ..schedules import get_schedule, schedule_names
from ..spec import (
    CollectiveAlgorithm,
    CongestionControl,
    CrossBuilding,
    Instance,
    LoadBalancing,
    LossRecovery,
    Plan,
    Recompute,
    TrafficClassConfig,
)
from ..spec import bounds as B

DEFAULT_CP = (1, 2, 4, 8)
DEFAULT_VIRTUAL_STAGES = (1, 2, 4)
DEFAULT_MICRO_BATCH_SIZES = (1, 2, 4)
# ZeRO-1 (distributed optimizer) has the comm volume of plain DP with less memory, and ZeRO-2 adds
# nothing over it under pipelining (grads are accumulated across micro-batches); ZeRO-3 trades
# weight all-gathers for memory. ZeRO-0 is kept only when a search section asks for it.
DEFAULT_ZERO_STAGES = (1, 3)
# Gradient bucket sizes (``Plan.dp_bucket_params``) as multiples of Megatron-Core's default, up to × 64
# (2.6B parameters at the 40M floor: a whole stage of most models in one bucket). Never below the default:
# smaller buckets only add latency, and the CP-SAT bound assumes it.
DEFAULT_BUCKET_FACTORS = (1, 4, 16, 64)


def divisors(n: int) -> list[int]:
    """Positive divisors of n, ascending."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _restrict(default: list, allowed: list | None) -> list:
    return [x for x in default if allowed is None or x in allowed]


@dataclass(frozen=True)
class Shape:
    """The per-GPU shard shape of one layer: what the compute and activation coefficients depend on."""

    tp: int
    cp: int
    ep: int
    micro_batch_size: int
    recompute: Recompute


@dataclass(frozen=True)
class DesignSpace:
    """Option lists per decision. ``network_options`` are full per-class transport settings."""

    tp: tuple[int, ...]
    cp: tuple[int, ...]
    pp: tuple[int, ...]
    ep: tuple[int, ...]
    virtual_stages: tuple[int, ...]
    micro_batch_sizes: tuple[int, ...]
    recompute: tuple[Recompute, ...]
    zero_stages: tuple[int, ...]
    schedules: tuple[str, ...]
    cross_building: tuple[CrossBuilding, ...]
    intra_network: tuple[TrafficClassConfig, ...]
    cross_network: tuple[TrafficClassConfig, ...]
    # one value: overlapping TP collectives with their GEMMs never costs more in the cost model
    tp_comm_overlap: bool = True
    bucket_factors: tuple[int, ...] = DEFAULT_BUCKET_FACTORS  # gradient bucket = Megatron's default × factor

    @staticmethod
    def bucket_size(plan: Plan, factor: int) -> int | None:
        """``plan``'s gradient bucket at Megatron's default × ``factor``, capped at the largest a plan may state
        (None: the default itself, or where the size does not matter)."""
        if factor == 1 or not sizes_dp_buckets(plan):
            return None
        return min(default_dp_bucket_params(plan) * factor, B.MAX_BUCKET_PARAMS)

    def bucket_sizes(self, plan: Plan) -> list[int | None]:
        """The gradient bucket sizes ``plan`` may take, smallest first (None: the default; [None] where
        the size does not matter)."""
        if not sizes_dp_buckets(plan):
            return [None]
        default = default_dp_bucket_params(plan)
        sizes: list[int | None] = []
        for factor in sorted(set(self.bucket_factors)):
            size = self.bucket_size(plan, factor)
            if size not in sizes and (size is None or size > default):
                sizes.append(size)
        return sizes or [None]

    def on_bucket_ladder(self, plan: Plan) -> Plan:
        """``plan`` with its gradient bucket at the nearest of ``bucket_sizes`` (by ratio, the smaller on a
        tie): a move that changes dp·cp moves the default, and with it the ladder."""
        default = default_dp_bucket_params(plan)
        current = plan.dp_bucket_params or default
        nearest = min(self.bucket_sizes(plan), key=lambda size: abs(math.log((size or default) / current)))
        return plan if nearest == plan.dp_bucket_params else plan.model_copy(update={"dp_bucket_params": nearest})

    def size(self) -> int:
        """Combinations of the option lists: shard shapes × pp × (schedule, v) × ZeRO × cross-building
        dimension × intra × cross network settings × bucket sizes (an upper bound: not every combination is
        valid)."""
        return (len(self.shapes) * len(self.pp) * len(self.schedule_chunks()) * len(self.zero_stages)
                * len(self.cross_building) * max(1, len(self.intra_network)) * max(1, len(self.cross_network))
                * len(set(self.bucket_factors)))

    def empty_reason(self, instance: Instance) -> str | None:
        """Why no plan can exist because some decision has no allowed option, or None."""
        search = instance.search
        for field, values, asked in (
            ("tp", self.tp, search.tp_degrees), ("cp", self.cp, search.cp_degrees), ("pp", self.pp, search.pp_degrees),
            ("ep", self.ep, search.ep_degrees), ("schedule", self.schedules, search.schedules),
            ("cross-building placement", self.cross_building, search.cross_building),
            ("intra-building network setting", self.intra_network, None),
        ):
            if not values:
                shown = [getattr(value, "value", value) for value in asked] if asked is not None else None
                allowed = f" (search allows {shown})" if shown is not None else ""
                return (f"no {field} option fits {instance.num_gpus} GPUs of the "
                        f"{instance.job.model_spec.name} job{allowed}")
        if not self.schedule_chunks():
            return f"no schedule in {list(self.schedules)} runs with virtual stages {list(self.virtual_stages)}"
        return None

    @property
    def shapes(self) -> list[Shape]:
        """All shard shapes (tp, cp, ep, micro-batch, recompute)."""
        return [Shape(*combo) for combo in product(self.tp, self.cp, self.ep, self.micro_batch_sizes, self.recompute)]

    def single_stage_schedule(self) -> tuple[str, int] | None:
        """The (schedule, v) pair pp = 1 plans use: with one stage every schedule runs the same ops, so
        the one holding the fewest activations."""
        pairs = [(get_schedule(name).in_flight_microbatches(1, v, 8), i, (name, v))
                 for i, (name, v) in enumerate(self.schedule_chunks()) if get_schedule(name).check(1, v, 8) is None]
        return min(pairs)[2] if pairs else None

    def schedule_chunks(self) -> list[tuple[str, int]]:
        """(schedule, virtual_stages) pairs the schedules accept for some pipeline."""
        pairs = []
        for name in self.schedules:
            schedule = get_schedule(name)
            for v in self.virtual_stages:
                if any(schedule.check(pp, v, max(pp, 1) * 4) is None for pp in self.pp if pp * v > 0):
                    pairs.append((name, v))
        return pairs


def _network_options(instance: Instance, cross: bool) -> tuple[TrafficClassConfig, ...]:
    search = instance.search
    algorithms = [CollectiveAlgorithm.RING, CollectiveAlgorithm.TREE, CollectiveAlgorithm.PAT]
    algorithms = _restrict(algorithms, search.collective_algorithms)
    if cross:
        algorithms.append(CollectiveAlgorithm.HIERARCHICAL)
    return tuple(
        TrafficClassConfig(collective_algorithm=alg, load_balancing=lb, congestion_control=cc, loss_recovery=lr,
                           qps_per_connection=qps, window_kib_per_qp=window)
        for alg, lb, cc, lr, qps, window in product(
            algorithms,
            _restrict(list(LoadBalancing), search.load_balancing),
            _restrict(list(CongestionControl), search.congestion_control),
            _restrict(list(LossRecovery), search.loss_recovery),
            search.qps_per_connection or QPS_CHOICES,
            search.window_kib_per_qp or WINDOW_KIB_CHOICES,
        )
    )


def design_space(instance: Instance) -> DesignSpace:
    """The option lists for ``instance``."""
    search = instance.search
    model = instance.job.model_spec
    n = instance.num_gpus
    nvlink = min(b.gpu_spec.nvlink_domain_size for b in instance.cluster.buildings)
    tp = [t for t in divisors(nvlink) if model.num_heads % t == 0
          and (model.num_kv_heads % t == 0 or t % model.num_kv_heads == 0) and n % t == 0]
    cp = [c for c in DEFAULT_CP if c == 1 or instance.job.seq_len % (2 * c) == 0]
    pp = [p for p in range(1, model.layers + 1) if n % p == 0]
    ep = [1] if model.moe is None else [e for e in divisors(model.moe.num_experts) if e <= n]
    multi = len(instance.cluster.buildings) > 1
    fits_one = any(b.num_gpus >= n for b in instance.cluster.buildings)
    cross = [CrossBuilding.NONE] if fits_one else []
    if multi:
        cross += [CrossBuilding.DP, CrossBuilding.PP]
    if len(instance.cluster.buildings) >= 3:  # two groups, one spanning two buildings
        cross.append(CrossBuilding.PP_DP)
    return DesignSpace(
        tp=tuple(_restrict(tp, search.tp_degrees)),
        cp=tuple(_restrict(cp, search.cp_degrees or list(DEFAULT_CP))),
        pp=tuple(_restrict(pp, search.pp_degrees)),
        ep=tuple(_restrict(ep, search.ep_degrees)),
        virtual_stages=tuple(search.virtual_stages or DEFAULT_VIRTUAL_STAGES),
        micro_batch_sizes=tuple(search.micro_batch_sizes or DEFAULT_MICRO_BATCH_SIZES),
        recompute=tuple(search.recompute or list(Recompute)),
        zero_stages=tuple(search.zero_stages or DEFAULT_ZERO_STAGES),
        schedules=tuple(search.schedules or schedule_names()),
        cross_building=tuple(_restrict(cross, search.cross_building)),
        intra_network=_network_options(instance, cross=False),
        cross_network=_network_options(instance, cross=True) if multi else (),
        tp_comm_overlap=search.tp_comm_overlap is None or True in search.tp_comm_overlap,
        bucket_factors=tuple(search.dp_bucket_factors or DEFAULT_BUCKET_FACTORS),
    )
