"""Agreement of the closed-form step estimate with the discrete-event simulator.

For every shipped instance (``instances/*.yaml``; ``infeasible-*`` ones are skipped — they have no
plan that fits memory) this derives a deterministic set of valid plans around an *anchor* (a
Megatron-like 1F1B plan: the widest TP, the smallest PP ≥ 4 that fits memory with the lightest
recompute) and varies one factor at a time:

- schedule: every registered schedule that accepts some (pp, v, m) near the anchor (interleaved
  1F1B with v = 2 and v = 4; ZB-V and DualPipe with v = 2), on the default placement and — where
  the instance has several buildings — with the pipeline split across buildings;
- PP ×2 / ÷2, TP ÷2, CP = 2, micro-batch ×2, stronger recompute, EP (MoE models), ZeRO 0 / 3;
- cross-building placement: DP across (whole replicas per building), PP across (stages of every
  replica chained over the buildings, even and — on mixed GPUs — peak-weighted layer splits),
  PP+DP (pairs of buildings pipeline, the pairs replicate) on four buildings;
- network: the catalog default vs tuned cross-building settings (receiver-driven admission,
  selective repeat, 16 QPs, 64 MiB window; plus the hierarchical collective for DP across), each
  knob clipped to what the instance's ``search`` section allows;
- ``RANDOM_PLANS`` plans drawn from the planner's own space (``optimizer.neighbourhood.random_plan``, seeded
  by the instance's name), which vary several decisions at once (ZeRO-3 with EP or CP, …).

Only plans that pass ``validate_plan`` (structure, search restrictions, memory) are kept. For each
plan ``estimate`` and ``simulate`` run on the same workload (``build_workload``), so they differ only
in how they compose the ops; the error is (estimate − simulated) / simulated. Where |error| > 5 %
the row names the breakdown term whose two values differ most and the effect the closed form does
not capture; the causes are summarised at the end with their counts.

Every instance with several buildings is also run on link variants (``LINK_VARIANTS``): every link
at 32 Gb/s (4 GB/s), 32 Tb/s (4 TB/s), and at its own bandwidth with 1e-3 loss — the regimes where
cross-building traffic, its sharing and loss recovery decide the step.

Usage: ``python benchmarks/estimate_vs_simulate.py [--instances NAME ...] [--max-plans N] [--no-variants]``.
Progress goes to stderr; the last line of stdout is the headline number (the largest disagreement).
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from scaleacross_opt.cost.report import BREAKDOWN_KEYS, StepReport
from scaleacross_opt.cost.step import build_workload, estimate, exposed_dp_s
from scaleacross_opt.cost.workload import LinkShare, StepWorkload
from scaleacross_opt.io import load_instance
from scaleacross_opt.optimizer.coefficients import prune_space
from scaleacross_opt.optimizer.neighbourhood import random_plan
from scaleacross_opt.optimizer.space import design_space
from scaleacross_opt.plan_defaults import dp_across_placement, even_layers, fill_defaults
from scaleacross_opt.schedules import get_schedule, schedule_names
from scaleacross_opt.simulator import simulate, simulate_workload
from scaleacross_opt.spec import (
    BuildingShare,
    CollectiveAlgorithm,
    CongestionControl,
    CrossBuilding,
    Instance,
    LoadBalancing,
    LossRecovery,
    NetworkConfig,
    Placement,
    Plan,
    Recompute,
)
from scaleacross_opt.validation.plan_checks import check_plan, validate_plan

ROOT = Path(__file__).resolve().parent.parent
THRESHOLD = 0.05  # |error| above which a row is explained
RECOMPUTE_ORDER = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
# schedule → virtual-stage counts tried with it
SCHEDULE_VS = {
    "1f1b": (1,), "gpipe": (1,), "zb-h1": (1,), "crosspipe-unidirectional": (1,),
    "interleaved-1f1b": (2, 4), "zb-v": (2,), "dualpipe": (2,),
}
MAX_TRIES = 400  # candidate shapes validated per requested variant before giving up
RANDOM_PLANS = 8  # plans per instance drawn at random from the planner's space (seeded by the instance's name)


# --------------------------------------------------------------------------------------------------
# Plan shapes and candidate generation
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Shape:
    """The structural part of a plan (degrees, schedule, recompute, ZeRO)."""

    tp: int
    cp: int
    pp: int
    dp: int
    ep: int
    v: int
    mbs: int
    schedule: str
    recompute: Recompute
    zero: int = 1

    def plan(self, placement: Placement | None = None, network: NetworkConfig | None = None) -> Plan:
        """The plan of this shape (placement / network left to ``fill_defaults`` when None)."""
        return Plan(
            tp=self.tp, cp=self.cp, pp=self.pp, dp=self.dp, ep=self.ep, virtual_stages=self.v,
            micro_batch_size=self.mbs, schedule=self.schedule, recompute=self.recompute,
            zero_stage=self.zero, placement=placement, network=network,
        )


def _allowed(values: list | None, value: object) -> bool:
    return values is None or value in values


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def tp_choices(instance: Instance) -> list[int]:
    """TP degrees the model's heads and every building's NVLink domain accept, widest first."""
    model = instance.job.model_spec
    out = []
    for tp in (8, 4, 2, 1):
        domains = [b.gpu_spec.nvlink_domain_size for b in instance.cluster.buildings]
        heads_ok = model.num_heads % tp == 0 and (model.num_kv_heads % tp == 0 or tp % model.num_kv_heads == 0)
        if heads_ok and all(tp <= d and d % tp == 0 for d in domains) and _allowed(instance.search.tp_degrees, tp):
            out.append(tp)
    return out


def ep_for(instance: Instance, dp: int, cp: int, want: int) -> int:
    """The largest EP ≤ ``want`` (power of two) the MoE model, dp·cp and the search allow; 1 for dense."""
    moe = instance.job.model_spec.moe
    if moe is None:
        return 1
    ep = want
    while ep > 1:
        if moe.num_experts % ep == 0 and (dp * cp) % ep == 0 and _allowed(instance.search.ep_degrees, ep):
            return ep
        ep //= 2
    return 1


def shapes(instance: Instance, schedule: str, v: int, ep_want: int) -> Iterator[Shape]:
    """Every degree combination for ``schedule`` with ``v`` chunks that passes the structural checks."""
    job, model, search = instance.job, instance.job.model_spec, instance.search
    n = instance.num_gpus
    for tp in tp_choices(instance):
        for cp in (1, 2, 4):
            if not _allowed(search.cp_degrees, cp) or n % (tp * cp):
                continue
            for pp in _divisors(n // (tp * cp), min(64, model.layers // v)):
                if not _allowed(search.pp_degrees, pp):
                    continue
                dp = n // (tp * cp * pp)
                for mbs in (1, 2):
                    if job.global_batch_size % (dp * mbs) or not _allowed(search.micro_batch_sizes, mbs):
                        continue
                    for recompute in RECOMPUTE_ORDER:
                        ep = ep_for(instance, dp, cp, ep_want)
                        yield Shape(tp, cp, pp, dp, ep, v, mbs, schedule, recompute)


def distance(shape: Shape, anchor: Shape) -> tuple:
    """Deterministic preference of a candidate shape: closest to the anchor, then lightest recompute."""
    return (
        abs(math.log2(shape.pp / anchor.pp)), shape.cp != anchor.cp, shape.tp != anchor.tp,
        shape.mbs != anchor.mbs, RECOMPUTE_ORDER.index(shape.recompute), shape,
    )


def _schedule_ok(instance: Instance, shape: Shape) -> bool:
    if shape.schedule not in schedule_names() or not _allowed(instance.search.schedules, shape.schedule):
        return False
    if shape.v > 1 and not _allowed(instance.search.virtual_stages, shape.v):
        return False
    if shape.v == 1 and not _allowed(instance.search.virtual_stages, 1):
        return False
    m = shape.plan().num_microbatches(instance.job.global_batch_size)
    return get_schedule(shape.schedule).check(shape.pp, shape.v, m) is None


def valid(instance: Instance, plan: Plan) -> Plan | None:
    """The filled plan when it passes ``validate_plan`` (memory included), else None."""
    try:
        filled = fill_defaults(instance, plan)
    except ValueError:
        return None
    if check_plan(filled, instance):
        return None
    return None if validate_plan(filled, instance) else filled


# --------------------------------------------------------------------------------------------------
# Placements and network settings
# --------------------------------------------------------------------------------------------------


def dp_across(instance: Instance, plan: Plan) -> Placement | None:
    """Whole replicas per building, every building used, greedily in cluster order."""
    buildings = instance.cluster.buildings
    if len(buildings) < 2:
        return None
    placement = dp_across_placement(instance, plan)
    return placement if placement is not None and len(placement.buildings) >= 2 else None


def _peak(instance: Instance, building: str) -> float:
    return instance.cluster.building(building).gpu_spec.peak_bf16_tflops


def weighted_layers(instance: Instance, stage_buildings: list[str], layers: int) -> list[int]:
    """Layers per stage proportional to the stage's GPU peak (largest remainders), ≥ 1 each."""
    weights = [_peak(instance, b) for b in stage_buildings]
    raw = [layers * w / sum(weights) for w in weights]
    split = [max(1, int(x)) for x in raw]
    by_remainder = sorted(range(len(raw)), key=lambda i: (-(raw[i] - int(raw[i])), i))
    i = 0
    while sum(split) < layers:
        split[by_remainder[i % len(split)]] += 1
        i += 1
    while sum(split) > layers:
        j = max(range(len(split)), key=lambda k: (split[k], -k))
        split[j] -= 1
    return split


def pp_across(instance: Instance, plan: Plan, *, weighted: bool = False) -> Placement | None:
    """Stages of all replicas chained over every building, stages proportional to the GPU count."""
    buildings = instance.cluster.buildings
    stage_gpus = plan.tp * plan.cp * plan.dp
    capacity = [b.num_gpus // stage_gpus for b in buildings]
    if len(buildings) < 2 or min(capacity) < 1 or sum(capacity) < plan.pp or plan.pp < len(buildings):
        return None
    stages = [1] * len(buildings)
    while sum(stages) < plan.pp:  # give the next stage to the building with the most capacity left per stage
        i = max(range(len(buildings)), key=lambda k: (capacity[k] / stages[k] if stages[k] < capacity[k] else -1, -k))
        if stages[i] >= capacity[i]:
            return None
        stages[i] += 1
    shares = [BuildingShare(building=b.name, dp_replicas=plan.dp, pp_stages=s)
              for b, s in zip(buildings, stages, strict=True)]
    where = [b.name for b, s in zip(buildings, stages, strict=True) for _ in range(s)]
    layers = instance.job.model_spec.layers
    split = weighted_layers(instance, where, layers) if weighted else even_layers(layers, plan.pp)
    if plan.virtual_stages > min(split):
        return None
    return Placement(cross_building=CrossBuilding.PP, buildings=shares, layers_per_stage=split)


def pp_dp_pairs(instance: Instance, plan: Plan) -> Placement | None:
    """Four or more (even) buildings: consecutive pairs pipeline (pp/2 stages each), pairs replicate."""
    buildings = instance.cluster.buildings
    if len(buildings) < 4 or len(buildings) % 2 or plan.pp % 2:
        return None
    groups = len(buildings) // 2
    if plan.dp % groups:
        return None
    replicas = plan.dp // groups
    shares = [BuildingShare(building=b.name, group=i // 2, dp_replicas=replicas, pp_stages=plan.pp // 2)
              for i, b in enumerate(buildings)]
    if any(replicas * plan.pp // 2 * plan.tp * plan.cp > b.num_gpus for b in buildings):
        return None
    layers = even_layers(instance.job.model_spec.layers, plan.pp)
    return Placement(cross_building=CrossBuilding.PP_DP, buildings=shares, layers_per_stage=layers)


def _pick(allowed: list | None, preferences: Iterable[object], fallback: object) -> object:
    for value in preferences:
        if _allowed(allowed, value):
            return value
    return fallback


def tuned_network(instance: Instance, plan: Plan, *, hierarchical: bool = False) -> NetworkConfig:
    """Default intra-building settings; cross-building receiver-driven, selective repeat, 16 QPs, 64 MiB
    (each knob clipped to the instance's search restrictions), optionally the hierarchical collective."""
    base = fill_defaults(instance, plan).network
    assert base is not None
    s = instance.search
    cross = base.cross_building
    cross = cross.model_copy(update={
        "congestion_control": _pick(
            s.congestion_control, (CongestionControl.RECEIVER_DRIVEN,), cross.congestion_control),
        "loss_recovery": _pick(s.loss_recovery, (LossRecovery.SELECTIVE_REPEAT,), cross.loss_recovery),
        "load_balancing": _pick(
            s.load_balancing, (LoadBalancing.ECMP, LoadBalancing.PACKET_SPRAYING), cross.load_balancing),
        "qps_per_connection": _pick(s.qps_per_connection, (16, 4), cross.qps_per_connection),
        "window_kib_per_qp": _pick(s.window_kib_per_qp, (65536, 16384), cross.window_kib_per_qp),
        "collective_algorithm": CollectiveAlgorithm.HIERARCHICAL if hierarchical else cross.collective_algorithm,
    })
    return base.model_copy(update={"cross_building": cross})


# --------------------------------------------------------------------------------------------------
# Plan selection per instance
# --------------------------------------------------------------------------------------------------


@dataclass
class Candidate:
    """A validated plan with a short label of how it was derived."""

    label: str
    plan: Plan


@dataclass
class Selector:
    """Collects distinct validated plans of one instance."""

    instance: Instance
    plans: list[Candidate] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)

    def add(self, label: str, plan: Plan | None) -> Plan | None:
        if plan is None:
            return None
        key = plan.model_dump_json()
        if key in self.seen:
            return plan
        self.seen.add(key)
        self.plans.append(Candidate(label, plan))
        return plan

    def nearest(self, anchor: Shape, schedule: str, v: int, place: Callable | None = None,
                network: Callable | None = None, keep: Callable[[Shape], bool] = lambda s: True) -> Plan | None:
        """The valid plan of ``schedule``/``v`` closest to ``anchor`` (placement built by ``place``)."""
        cands = sorted((s for s in shapes(self.instance, schedule, v, anchor.ep) if keep(s)),
                       key=lambda s: distance(s, anchor))
        for tries, shape in enumerate(cands):
            if tries >= MAX_TRIES:
                break
            if not _schedule_ok(self.instance, shape):
                continue
            plan = shape.plan()
            if place is not None:
                placement = place(self.instance, plan)
                if placement is None:
                    continue
                plan = shape.plan(placement)
            if network is not None:
                plan = plan.model_copy(update={"network": network(self.instance, plan)})
            filled = valid(self.instance, plan)
            if filled is not None:
                return filled
        return None


def find_anchor(instance: Instance) -> Shape | None:
    """1F1B, widest TP, mbs 1, smallest PP ≥ 4 (else ≥ 2, else 1) that fits with the lightest recompute."""
    ep_want = 8 if instance.job.model_spec.moe is not None else 1
    all_shapes = [s for s in shapes(instance, "1f1b", 1, ep_want) if s.cp == 1 and s.mbs == 1]
    if not all_shapes:
        return None
    tp = max(s.tp for s in all_shapes)
    for min_pp in (4, 2, 1):
        pool = sorted((s for s in all_shapes if s.tp == tp and s.pp >= min_pp),
                      key=lambda s: (s.pp, RECOMPUTE_ORDER.index(s.recompute)))
        for shape in pool:
            if valid(instance, shape.plan()) is not None:
                return shape
    return None


def select_plans(instance: Instance) -> list[Candidate]:
    """The deterministic plan set of one instance (see the module docstring)."""
    sel = Selector(instance)
    anchor = find_anchor(instance)
    if anchor is None:
        return []
    multi = len(instance.cluster.buildings) > 1
    sel.add("anchor", valid(instance, anchor.plan()))

    # schedules on the default placement
    for name in schedule_names():
        for v in SCHEDULE_VS.get(name, (1,)):
            sel.add(f"schedule {name} v{v}", sel.nearest(anchor, name, v))

    # one factor at a time around the anchor
    def vary(label: str, **changes: object) -> None:
        target = Shape(**{**anchor.__dict__, **changes})
        sel.add(label, sel.nearest(target, target.schedule, target.v,
                                   keep=lambda s: all(getattr(s, k) == val for k, val in changes.items()
                                                      if k not in ("dp", "ep"))))

    vary("pp x2", pp=anchor.pp * 2)
    if anchor.pp >= 2:
        vary("pp /2", pp=anchor.pp // 2)
    if anchor.tp >= 2:
        vary("tp /2", tp=anchor.tp // 2)
    vary("cp 2", cp=2)
    vary("mbs 2", mbs=2)
    for rc in RECOMPUTE_ORDER[RECOMPUTE_ORDER.index(anchor.recompute) + 1:]:
        vary(f"recompute {rc.value}", recompute=rc)
    for zero in (0, 3):
        if _allowed(instance.search.zero_stages, zero):
            sel.add(f"zero {zero}", valid(instance, Shape(**{**anchor.__dict__, "zero": zero}).plan()))
    if instance.job.model_spec.moe is not None:
        for ep in (1, anchor.ep * 4):
            if ep != anchor.ep:
                shape = Shape(**{**anchor.__dict__, "ep": ep})
                sel.add(f"ep {ep}", valid(instance, shape.plan()))

    if multi:
        # placement: DP across vs PP across, and the schedules with the pipeline across buildings
        sel.add("placement dp-across", sel.nearest(anchor, "1f1b", 1, place=dp_across))
        for name in schedule_names():
            for v in SCHEDULE_VS.get(name, (1,))[:1]:
                sel.add(f"pp-across {name} v{v}", sel.nearest(anchor, name, v, place=pp_across))
        if len({b.gpu_spec.name for b in instance.cluster.buildings}) > 1:
            sel.add("pp-across weighted layers", sel.nearest(
                anchor, "1f1b", 1, place=lambda i, p: pp_across(i, p, weighted=True)))
        sel.add("pp+dp pairs", sel.nearest(anchor, "1f1b", 1, place=pp_dp_pairs))
        # network: tuned cross-building settings
        sel.add("dp-across tuned net", sel.nearest(anchor, "1f1b", 1, place=dp_across, network=tuned_network))
        sel.add("dp-across tuned net + hierarchical", sel.nearest(
            anchor, "1f1b", 1, place=dp_across, network=lambda i, p: tuned_network(i, p, hierarchical=True)))
        for name, v in (("1f1b", 1), ("crosspipe-unidirectional", 1), ("interleaved-1f1b", 2)):
            sel.add(f"pp-across {name} v{v} tuned net", sel.nearest(
                anchor, name, v, place=pp_across, network=tuned_network))
    # decisions varied together (ZeRO-3 with EP or CP, …), which the one-at-a-time plans above never combine
    space = prune_space(instance, design_space(instance))
    rng = random.Random(instance.name)
    for _ in range(RANDOM_PLANS):
        sel.add("random", random_plan(instance, space, rng))
    return sel.plans


# --------------------------------------------------------------------------------------------------
# Comparison and attribution
# --------------------------------------------------------------------------------------------------

# cause → (short label, what the closed form misses). Keys are assigned by ``explain``.
CAUSES: dict[str, tuple[str, str]] = {
    "sharing": (
        "classes sharing NICs and links in time",
        "the simulator shares each NIC and cross-building link among the flows in progress (pipeline "
        "transfers, EP all-to-alls, ZeRO-3 gathers, DP syncs), so they slow each other; the closed form shares "
        "only the flows inside one op and a chunk's gradient buckets beside its last backward "
        "(``cost.op_sharing``), and bounds the rest by each resource's total per step (estimate low).",
    ),
    "dp-bucket": (
        "DP sync overlap (bucketing)",
        "both models release each gradient bucket at its point in its chunk's last backward; the closed form "
        "places that backward by the drain of the later model positions before the pipeline's end, while in "
        "the simulator it ends closer to the end (waits, transfers), so fewer buckets hide (estimate low).",
    ),
    "dp-per-chunk": (
        "DP sync overlap (per-chunk start)",
        "with v > 1 chunks the simulated last backwards of the early chunks end earlier before the pipeline's "
        "end than the drain of the later positions the closed form credits, so more of their syncs hide "
        "(estimate high).",
    ),
    "dp-drain": (
        "DP sync overlap (drain window)",
        "the closed form assumes stage s finishes Σ_{s'<s} B_s' before stage 0 (1F1B cool-down) and hides "
        "that much sync; this schedule's stages finish closer together (deferred W ops, V shape, cross-"
        "building hops in the drain), so less sync is hidden (estimate low).",
    ),
    "dp-longer-drain": (
        "DP sync overlap (longer drain)",
        "the simulated drain (stage ends spread by transfers and waits) is longer than Σ B of the earlier "
        "stages, so more sync hides than the closed form credits (estimate high).",
    ),
    "zb-h1-bubble": (
        "ZB-H1 bubble at F = B = W",
        "bubble_fraction (p−1)/(3m) is the paper's (p−1)(T_F+T_B−T_W) per stage evaluated at T_F = T_B = T_W; "
        "the real W is shorter than (F+B)/2, so each stage idles longer; the closed form runs the end stages' "
        "real orders, not the middle ones' (estimate low).",
    ),
    "zb-v-order": (
        "ZB-V greedy order vs its bound",
        "the ZB-V op order is the faster of two greedy list schedules (unit op times, and the plan's F:B:W "
        "ratio) computed with free transfers; with p2p latency and unequal stages its middle stages wait "
        "beyond the (p−1)/(6m) bound, and the closed form runs only the end stages' real orders (estimate low).",
    ),
    "dualpipe-bubble": (
        "DualPipe bubble at F = B = W",
        "bubble_fraction (p−1)/(6m) assumes T_F = T_B = T_W per chunk; the real op times leave more idle "
        "time in the fixed DualPipeV order.",
    ),
    "crosspipe-bubble": (
        "CrossPipe bubble at T_F = T_B",
        "bubble_fraction uses (p−1)(m+p)/(2pm), i.e. T_F = T_B; the backward (B+W) is ≈ 1.5–2× the forward, "
        "so the (p−1)·T_B wait at every window switch is longer; the closed form runs only the end stages' "
        "real orders (estimate low).",
    ),
    "stage-imbalance": (
        "uneven stages",
        "the fill/drain term uses the mean non-bottleneck stage time; with uneven stages (LM head, "
        "embedding, mixed GPUs, uneven layer split) the real fill/drain differs.",
    ),
    "pp-latency": (
        "per-micro-batch cross-building latency",
        "the boundary latency sits on the critical path once per round trip through the stages away from the "
        "cross-building boundaries (CrossPipe's window switches at the pipeline's ends), whose op orders the "
        "closed form relaxes to their work alone; it follows only the stages at the boundaries (estimate low).",
    ),
    "pp-contention": (
        "link contention within a replica",
        "transfers of different senders share one cross-building path (interleaved: the wrap-around and a "
        "boundary stage), or stages away from the boundaries wait for queued transfers; the closed form "
        "follows the op orders of the stages at cross-building boundaries and each sender's own queue, the "
        "rest as the path's total busy time (estimate low).",
    ),
    "pp-overlap": (
        "p2p overlap",
        "the simulator overlaps point-to-point transfers with other compute that the closed form charges on "
        "top of the makespan (estimate high).",
    ),
    "other": ("other", "no single effect identified."),
}


@dataclass
class Row:
    """One compared plan with the workload both reports were composed from."""

    instance: Instance
    label: str
    plan: Plan
    est: StepReport
    sim: StepReport
    workload: StepWorkload

    @property
    def error(self) -> float:
        return (self.est.step_time_s - self.sim.step_time_s) / self.sim.step_time_s

    def pipeline_error(self) -> float:
        """Error of the pipeline makespan alone (step minus exposed DP sync and optimizer)."""
        zero3 = self.workload.exposed_comm_s.get("dp", 0.0)
        b = self.est.breakdown
        est = self.est.step_time_s - (b["exposed_dp_s"] - zero3) - b["optimizer_s"]
        sim = float(self.sim.details["pipeline_makespan_s"])  # type: ignore[arg-type]
        return (est - sim) / sim

    def diffs(self) -> dict[str, float]:
        """Simulated − estimated per breakdown term, with ZeRO-3 gather exposure moved to exposed_dp_s in
        the simulated breakdown as the estimate does (the simulator leaves it inside compute_s)."""
        zero3 = self.workload.exposed_comm_s.get("dp", 0.0)
        sim = dict(self.sim.breakdown)
        sim["compute_s"] -= zero3
        sim["exposed_dp_s"] += zero3
        return {k: sim[k] - self.est.breakdown[k] for k in BREAKDOWN_KEYS}

    def term(self) -> str:
        """Breakdown term whose estimated and simulated values differ most."""
        diffs = self.diffs()
        return max(BREAKDOWN_KEYS, key=lambda k: abs(diffs[k]))


def _dp_no_bucket(workload: StepWorkload) -> float:
    """The closed form's exposed DP sync with every bucket released at its chunk's last backward's end."""
    return max(exposed_dp_s(workload, group, bucketed=False) for group in workload.groups)


def _op_ratio(workload: StepWorkload) -> str:
    """F : B : W of the busiest stage of the first group, as multiples of F."""
    g = workload.groups[0]
    s = int(np.argmax((g.fwd_s + g.bwd_s).sum(axis=1)))
    f, b, w = (float(x[s].sum()) for x in (g.fwd_s, g.bwd_input_s, g.bwd_weight_s))
    return f"F:B:W=1:{b / f:.2f}:{w / f:.2f}"


def _with_links(workload: StepWorkload, *, bandwidth: bool, latency: bool) -> StepWorkload:
    """The workload with link bandwidths made infinite and/or latencies zeroed (False = switched off)."""
    links = {
        key: LinkShare(link.src_building, link.dst_building,
                       link.bandwidth_bytes_per_s if bandwidth else math.inf, link.latency_s if latency else 0.0)
        for key, link in workload.links.items()
    }
    return replace(workload, links=links)


def _p2p_split(workload: StepWorkload) -> tuple[float, float]:
    """Simulated pipeline makespan added by link latency alone and by bandwidth (incl. contention) alone."""
    free = simulate_workload(_with_links(workload, bandwidth=False, latency=False)).pipeline_end_s
    latency = simulate_workload(_with_links(workload, bandwidth=False, latency=True)).pipeline_end_s
    bandwidth = simulate_workload(_with_links(workload, bandwidth=True, latency=False)).pipeline_end_s
    return latency - free, bandwidth - free


def _closed_form_latency(workload: StepWorkload) -> float:
    """Latency part of the closed form's one forward + one backward traversal of every stage boundary."""
    schedule = get_schedule(workload.schedule)
    pp, v = workload.pp, workload.virtual_stages
    order = [s for _, s in sorted((schedule.chunk_stage(pp, v, c, s), s) for s in range(pp) for c in range(v))]
    out = 0.0
    for group in workload.groups:
        where = group.stage_building
        out = max(out, sum(workload.link(where[a], where[b]).latency_s + workload.link(where[b], where[a]).latency_s
                           for a, b in itertools.pairwise(order)))
    return out


def explain(row: Row) -> tuple[str, str]:
    """(cause key, short row text) of a disagreement, from the term that differs most and diagnostics."""
    term, plan, w = row.term(), row.plan, row.workload
    est, sim = row.est.breakdown, row.sim.breakdown
    d = row.diffs()[term]
    sharing = float(row.sim.details.get("resource_sharing_s", 0.0))  # type: ignore[arg-type]
    if sharing > 0 and sharing >= 0.5 * (row.sim.step_time_s - row.est.step_time_s):
        return "sharing", f"classes sharing NICs / links add {sharing:.3f}s to the simulated pipeline"
    if term == "exposed_dp_s":
        zero3 = w.exposed_comm_s.get("dp", 0.0)
        est_dp, sim_dp = est["exposed_dp_s"] - zero3, sim["exposed_dp_s"]
        no_bucket = _dp_no_bucket(w)
        if sim_dp > est_dp:
            if sim_dp <= no_bucket * 1.02 + 1e-9:
                return "dp-bucket", (f"closed form hides {no_bucket - est_dp:.3f}s of DP sync behind buckets; "
                                     f"sim exposes {sim_dp:.3f}s")
            return "dp-drain", f"sim exposes {sim_dp:.3f}s of DP sync > {no_bucket:.3f}s even without bucket credit"
        if plan.virtual_stages > 1:
            return "dp-per-chunk", f"per-chunk sync start hides more: sim {sim_dp:.3f}s vs closed form {est_dp:.3f}s"
        return "dp-longer-drain", f"sim drain hides more sync: {sim_dp:.3f}s vs {est_dp:.3f}s"
    if term == "bubble_s":
        ratio = _op_ratio(w)
        key = {"zb-h1": "zb-h1-bubble", "zb-v": "zb-v-order", "dualpipe": "dualpipe-bubble",
               "crosspipe-unidirectional": "crosspipe-bubble"}.get(plan.schedule, "stage-imbalance")
        return key, f"bubble sim {sim['bubble_s']:.3f}s vs formula {est['bubble_s']:.3f}s at {ratio}"
    if term == "exposed_pp_s":
        sim_lat, sim_bw = _p2p_split(w)
        est_lat = _closed_form_latency(w)
        est_bw = max(0.0, est["exposed_pp_s"] - est_lat)
        text = (f"p2p sim {sim['exposed_pp_s']:.3f}s vs {est['exposed_pp_s']:.3f}s; from latency alone "
                f"{sim_lat:.3f}s vs {est_lat:.3f}s, from bandwidth alone {sim_bw:.3f}s vs {est_bw:.3f}s")
        if d < 0:
            return "pp-overlap", text
        return ("pp-latency" if sim_lat - est_lat >= sim_bw - est_bw else "pp-contention"), text
    return "other", f"{term} differs by {d:+.3f}s"


def summary(plan: Plan, instance: Instance) -> str:
    """Compact plan description."""
    assert plan.placement is not None and plan.network is not None
    m = plan.num_microbatches(instance.job.global_batch_size)
    net = plan.network.cross_building
    parts = [
        plan.schedule, f"tp{plan.tp}", f"cp{plan.cp}", f"pp{plan.pp}", f"v{plan.virtual_stages}", f"dp{plan.dp}",
        f"mb{plan.micro_batch_size}", f"m{m}", f"rc={plan.recompute.value}", f"z{plan.zero_stage}",
    ]
    if plan.ep > 1:
        parts.append(f"ep{plan.ep}")
    parts.append(f"X={plan.placement.cross_building.value}")
    layers = plan.placement.layers_per_stage
    if layers != even_layers(instance.job.model_spec.layers, plan.pp):
        parts.append("layers=" + "/".join(map(str, layers)))
    if len(instance.cluster.buildings) > 1:
        is_tuned = net.qps_per_connection > 1 or net.loss_recovery is LossRecovery.SELECTIVE_REPEAT
        tuned = "tuned" if is_tuned else "default"
        if net.collective_algorithm is CollectiveAlgorithm.HIERARCHICAL:
            tuned += "+hier"
        parts.append(f"net={tuned}")
    return " ".join(parts)


def pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile of ``values`` (q in [0, 1])."""
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


# (suffix, link bandwidth Gb/s or None to keep, loss rate or None to keep)
LINK_VARIANTS = (("@4GB/s", 32.0, None), ("@4TB/s", 32_000.0, None), ("@loss1e-3", None, 1e-3))


def link_variants(instance: Instance) -> list[Instance]:
    """The instance with every link's bandwidth / loss replaced as in ``LINK_VARIANTS`` (several buildings)."""
    if len(instance.cluster.buildings) < 2:
        return []
    out = []
    for suffix, bandwidth, loss in LINK_VARIANTS:
        data = instance.model_dump(mode="json", exclude_none=True)
        for link in data["cluster"]["links"]:
            link["bandwidth_gbps"] = bandwidth if bandwidth is not None else link["bandwidth_gbps"]
            link["loss_rate"] = loss if loss is not None else link.get("loss_rate", 0.0)
        data["name"] = f"{instance.name}{suffix}"
        out.append(Instance.model_validate(data))
    return out


def main(argv: list[str] | None = None) -> None:
    """Run the comparison and print rows, causes and the summary."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--instances", nargs="*", help="instance names (default: all shipped)")
    parser.add_argument("--max-plans", type=int, default=0, help="cap plans per instance (0: no cap)")
    parser.add_argument("--no-variants", action="store_true", help="skip the slow / fast / lossy link variants")
    args = parser.parse_args(argv)
    paths = sorted((ROOT / "instances").glob("*.yaml"))
    if args.instances:
        paths = [p for p in paths if p.stem in args.instances]
    rows: list[Row] = []
    causes: dict[str, list[Row]] = defaultdict(list)
    started = time.perf_counter()
    print(f"{'instance':<40} {'plan':<84} {'estimate':>9} {'simulated':>9} {'error':>7}  term: effect missed")
    for path in paths:
        if path.stem.startswith("infeasible"):
            print(f"# skipped {path.stem}: infeasible by construction (no plan fits memory)")
            print(f"[{time.perf_counter() - started:6.1f}s] {path.stem}: skipped (infeasible)", file=sys.stderr)
            continue
        base = load_instance(path)
        for instance in [base, *([] if args.no_variants else link_variants(base))]:
            candidates = select_plans(instance)
            if args.max_plans:
                candidates = candidates[: args.max_plans]
            print(f"[{time.perf_counter() - started:6.1f}s] {instance.name}: {len(candidates)} plans", file=sys.stderr)
            if not candidates:
                print(f"# {instance.name}: no valid plan found")
            for cand in candidates:
                row = Row(instance, cand.label, cand.plan, estimate(instance, cand.plan), simulate(instance, cand.plan),
                          build_workload(instance, cand.plan))
                rows.append(row)
                tail = ""
                if abs(row.error) > THRESHOLD:
                    cause, text = explain(row)
                    causes[cause].append(row)
                    tail = f"{row.term()}: [{cause}] {text}"
                print(f"{instance.name:<40} {summary(cand.plan, instance):<84} {row.est.step_time_s:9.3f} "
                      f"{row.sim.step_time_s:9.3f} {pct(row.error):>7}  {tail}")
            print(f"[{time.perf_counter() - started:6.1f}s] {instance.name}: done", file=sys.stderr)
    if not rows:
        print("no plans compared")
        return

    print()
    print(f"Disagreements > {100 * THRESHOLD:.0f} % by cause (what the closed form misses):")
    for cause, members in sorted(causes.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        label, text = CAUSES[cause]
        signs = sorted({"low" if r.error < 0 else "high" for r in members})
        errs = [100 * r.error for r in members]
        print(f"- {cause} — {label}: {len(members)} plans, error {min(errs):+.1f} % … {max(errs):+.1f} % "
              f"(estimate {'/'.join(signs)})")
        print(f"    {text}")
        by_schedule = defaultdict(int)
        for r in members:
            by_schedule[r.plan.schedule] += 1
        print("    schedules: " + ", ".join(f"{k} {v}" for k, v in sorted(by_schedule.items())))

    errors = [abs(r.error) for r in rows]
    pipe = [abs(r.pipeline_error()) for r in rows]
    print()
    print(f"plans compared: {len(rows)} on {len({r.instance.name for r in rows})} instances")
    print(f"median |error|: {100 * statistics.median(errors):.1f} %   p90: {100 * quantile(errors, 0.9):.1f} %   "
          f"max: {100 * max(errors):.1f} %")
    print(f"within 5 %: {sum(e <= THRESHOLD for e in errors)}/{len(rows)} "
          f"({100 * sum(e <= THRESHOLD for e in errors) / len(rows):.0f} %)")
    above = [r.error for r in rows if r.error > 0]
    print(f"estimate below simulation: {len(rows) - len(above)}/{len(rows)}; above (not a lower bound): "
          f"{len(above)}, max {100 * max(above, default=0.0):+.1f} %")
    print(f"pipeline makespan only (no DP sync, no optimizer): median |error| {100 * statistics.median(pipe):.1f} %, "
          f"max {100 * max(pipe):.1f} %")
    print("per schedule:        n   median |error|   max |error|   median |pipeline error|")
    per: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        per[r.plan.schedule].append(r)
    for name in sorted(per):
        es = [abs(r.error) for r in per[name]]
        ps = [abs(r.pipeline_error()) for r in per[name]]
        print(f"  {name:<26} {len(es):3d}   {100 * statistics.median(es):6.1f} %        {100 * max(es):6.1f} %"
              f"        {100 * statistics.median(ps):6.1f} %")
    print(f"median |estimate − simulate| / simulate: {100 * statistics.median(errors):.1f} % over {len(rows)} plans")
    print(f"max |estimate − simulate| / simulate: {100 * max(errors):.1f} % over {len(rows)} plans "
          f"(target ≤ 15 %)")


if __name__ == "__main__":
    main()
