"""The physical floor of a plan's step time: work ÷ capacity of every resource, a bound no real run beats.

Written from the plan and instance specs alone (it shares no code with ``cost``, ``simulator``,
``optimizer`` or ``schedules``), so a step time below it is a bug in whatever produced that time.
Each term is an unconditional lower bound: peaks instead of efficiencies, no latency, no contention
beyond the one resource the term looks at, and work left out wherever it is uncertain. The floor is
the max over terms; compute and bytes are never added (communication may hide behind compute).
Notation: h hidden size, T = (global_batch ÷ dp) · seq_len tokens per replica per step
(m = global_batch ÷ (dp · micro_batch) micro-batches of micro_batch · seq_len tokens), B bytes per value.

**Parameters and FLOPs of one layer** (matmul weights only; norms and biases left out, which can only
lower the floor). Attention: h·(a·d) query + 2·h·(k·d) key/value + (a·d)·h output, a query heads,
k key/value heads, d head dim. MLP: (3 if gated else 2)·h·f. An MoE layer replaces the MLP with a
router h·E, shared experts n_s·(3|2)·h·f_e and E routed experts (3|2)·h·f_e each, of which a token
uses top_k (dropless routing, as the model spec defines it). Model FLOPs per token = 2 × the matmul
parameters the token passes through forward, 4 × backward: 6 × in all (Narayanan et al. 2021);
attention-score FLOPs, the LM head and recomputation are left out. Which of a stage's layers are
dense (the first ``first_dense_layers`` of the model) depends on the schedule's chunk order, so a
set of c layers counts as its cheapest admissible mix: k dense and c − k MoE layers with
max(0, c − n_moe) ≤ k ≤ min(c, n_dense) (exact when the set is the whole model).

1. **Compute** (stage s on building X): a GPU of stage s holds 1/(tp·cp) of its replica's stage
   work (TP splits every matmul, CP the sequence; with EP the expert work of X's tokens stays on
   X's GPUs, so the busiest GPU does at least the average), at the GPU's dense peak (the larger of
   the bf16 and fp8 peaks for fp8 jobs):
   t = 6 · T · flops_per_token(layers of s) ÷ (tp · cp · peak).
2. **Cross-building DP sync** (information argument: a party that must end up with values that
   depend on every replica's gradient must receive at least one value per parameter from outside
   itself). For a set S of buildings and every stage s with replicas both inside and outside S,
   S receives ≥ P_s values per step, P_s = the stage's parameters of one replica (all tp·cp shards).
   ZeRO-0/1/2: S needs every updated parameter (all-reduce, or reduce-scatter + all-gather).
   ZeRO-3: S needs the outside sums for the fraction f it owns (f·P_s) and the updated parameters it
   does not own for the next forward ((1 − f)·P_s): P_s again. Expert weights count only when every
   building holds whole EP groups (then each holds a copy of every expert); the embedding and LM head
   (vocab·h each, once if tied) count only when every stage is synced across the cut, since the
   schedule decides which stage carries them.
3. **ZeRO-3 extra gathers** add nothing provable beyond term 2: the backward's second gather can be
   served from a copy kept inside the building (ZeRO++ hpZ, Wang et al. 2023, arXiv 2306.10209; or
   host memory), so only the one forward gather per step is certain, and term 2 already counts it.
4. **Cross-building pipeline transfers**: each micro-batch moves an activation of
   micro_batch · seq_len · h · B bytes across a stage boundary forward and its gradient backward
   (split over TP/CP ranks, the same bytes in total). With v = 1 stage s holds the s-th layer block,
   so S receives, per replica, m activations for every boundary s → s+1 entering S and m gradients
   for every boundary leaving it. With v > 1 the chunk order is the schedule's; any order visits
   every stage forward and back, so a pipeline with stages inside and outside S enters S at least
   once per micro-batch (forward or backward): m transfers per replica.
5. Terms 2 and 4 share S's ingress: bytes enter over the links crossing the cut (Σ bandwidth_gbps
   ÷ 8 per direction; multi-hop routes and multipath cross the cut too, so cuts rather than single
   links are the sound capacity) and, for one building, through the scale-out NICs of its job GPUs
   (GPUs × nic_bandwidth_gbps ÷ 8). Every set S of buildings is a cut (singletons only beyond
   ``_MAX_CUT_BUILDINGS`` buildings). Link egress needs no term of its own: what leaves S is what
   enters its complement, another cut over the same links. A building's NICs also carry its egress
   (the bytes the rest of the cluster must receive all come from it), a second NIC term. Per-GPU NIC
   terms are left out: node-mates can relay over NVLink, so only the building's NIC total is certain.

Values cross in the plan's matmul precision without compression: B = 2 bytes for bf16, 1 byte for
fp8 (FP8-LM, Peng et al. 2023, arXiv 2310.18313, communicates FP8 gradients and weights).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass

from ..spec import CrossBuilding, Instance, Link, ModelSpec, Plan, Precision

_MAX_CUT_BUILDINGS = 10  # every subset of buildings up to this many (2^10 cuts), else single buildings


@dataclass(frozen=True)
class FloorTerm:
    """One resource's share of the floor: ``bytes_or_flops`` ÷ ``capacity_per_s`` = ``seconds``."""

    resource: str
    bytes_or_flops: float
    capacity_per_s: float
    seconds: float


@dataclass(frozen=True)
class PhysicalFloor:
    """The floor (max over its terms) and every term it was taken over."""

    seconds: float
    terms: tuple[FloorTerm, ...]

    @property
    def binding(self) -> FloorTerm:
        """The term that sets the floor."""
        return max(self.terms, key=lambda term: term.seconds)


@dataclass(frozen=True)
class _PerLayer:
    """A per-layer quantity for dense and MoE layers, and how many layers of each kind the model has."""

    dense: float
    moe: float
    n_dense: int
    n_moe: int

    def at_least(self, layers: int) -> float:
        """The quantity of ``layers`` layers under the cheapest admissible dense/MoE mix."""
        low, high = max(0, layers - self.n_moe), min(layers, self.n_dense)
        return min(k * self.dense + (layers - k) * self.moe for k in (low, high))


def _attention_params(model: ModelSpec) -> float:
    """Weights of one layer's attention: Q, K, V and output of MHA/GQA; for MLA (DeepSeek-V2 §2.1) the query
    latent h·r_q + r_q·n·(d_nope + d_rope) (or h·n·(d_nope + d_rope) without it), the key/value latent
    h·(r_kv + d_rope) + r_kv·n·(d_nope + d_v), and the output n·d_v·h."""
    h, n, mla = model.hidden_size, model.num_heads, model.mla
    if mla is None:
        d = model.head_dim_resolved
        return 2 * h * n * d + 2 * h * model.num_kv_heads * d
    qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    queries = h * n * qk if mla.q_lora_rank is None else mla.q_lora_rank * (h + n * qk)
    keys_values = h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank * n * (mla.qk_nope_head_dim
                                                                                           + mla.v_head_dim)
    return queries + keys_values + n * mla.v_head_dim * h


def _layer_params(model: ModelSpec, count_experts: bool) -> tuple[_PerLayer, _PerLayer]:
    """(parameters synced per layer, matmul parameters a token passes through per layer)."""
    h = model.hidden_size
    attention = _attention_params(model)
    mats = 3 if model.gated_mlp else 2
    dense = attention + mats * h * model.ffn_hidden_size
    moe = model.moe
    if moe is None:
        return _PerLayer(dense, dense, model.layers, 0), _PerLayer(dense, dense, model.layers, 0)
    expert = mats * h * moe.expert_ffn_hidden_size
    always = attention + h * moe.num_experts + moe.num_shared_experts * expert
    held = always + (moe.num_experts * expert if count_experts else 0)
    n_dense = min(moe.first_dense_layers, model.layers)
    return (_PerLayer(dense, held, n_dense, model.layers - n_dense),
            _PerLayer(dense, always + moe.top_k * expert, n_dense, model.layers - n_dense))


def _pipelines(plan: Plan) -> list[tuple[int, tuple[str, ...]]]:
    """(replicas, building of each stage) for every distinct pipeline layout of the placement."""
    placement = plan.placement
    assert placement is not None
    mode = placement.cross_building
    if mode in (CrossBuilding.NONE, CrossBuilding.DP):
        return [(share.dp_replicas, (share.building,) * plan.pp) for share in placement.buildings]
    chains: dict[int, list[str]] = defaultdict(list)
    replicas: dict[int, int] = {}
    for share in placement.buildings:
        group = share.group if mode is CrossBuilding.PP_DP else 0
        chains[group] += [share.building] * share.pp_stages
        replicas[group] = plan.dp if mode is CrossBuilding.PP else share.dp_replicas
    return [(replicas[group], tuple(chain)) for group, chain in chains.items()]


def _cuts(names: list[str]) -> list[frozenset[str]]:
    """Non-empty proper subsets of the buildings (single buildings only when there are many)."""
    sizes = range(1, len(names)) if len(names) <= _MAX_CUT_BUILDINGS else (1,)
    return [frozenset(c) for size in sizes for c in itertools.combinations(names, size)]


def _cut_label(inside: frozenset[str], crossing: list[Link]) -> str:
    """``link a->b`` for a cut crossed by one link, else the building or building set it bounds."""
    if len(crossing) == 1:
        link = crossing[0]
        return f"link {link.a}->{link.b}" if link.b in inside else f"link {link.b}->{link.a}"
    if len(inside) == 1:
        return f"building {next(iter(inside))} ingress over {len(crossing)} links"
    return f"ingress of {{{', '.join(sorted(inside))}}} over {len(crossing)} links"


def _compute_terms(instance: Instance, plan: Plan, flops: _PerLayer,
                   pipelines: list[tuple[int, tuple[str, ...]]]) -> list[FloorTerm]:
    """Term 1: per (stage, building) the busiest GPU's model FLOPs at peak."""
    assert plan.placement is not None
    job = instance.job
    tokens = job.global_batch_size * job.seq_len / plan.dp
    terms: dict[str, FloorTerm] = {}
    for _, chain in pipelines:
        for stage, name in enumerate(chain):
            gpu = instance.cluster.building(name).gpu_spec
            peak = gpu.peak_bf16_tflops
            if job.precision is Precision.FP8:
                peak = max(peak, gpu.peak_fp8_tflops)
            work = 6 * tokens * flops.at_least(plan.placement.layers_per_stage[stage]) / (plan.tp * plan.cp)
            resource = f"compute: stage {stage} on {name}"
            terms[resource] = FloorTerm(resource, work, peak * 1e12, work / (peak * 1e12))
    return list(terms.values())


def _ingress_bytes(instance: Instance, plan: Plan, inside: frozenset[str], synced: _PerLayer,
                   pipelines: list[tuple[int, tuple[str, ...]]]) -> float:
    """Terms 2 and 4: bytes that must enter the building set ``inside`` per step."""
    assert plan.placement is not None
    model = instance.job.model_spec
    value = 1 if instance.job.precision is Precision.FP8 else 2
    layers = plan.placement.layers_per_stage
    synced_stages = [s for s in range(plan.pp) if len({chain[s] in inside for _, chain in pipelines}) == 2]
    params = synced.at_least(sum(layers[s] for s in synced_stages))
    if len(synced_stages) == plan.pp:
        params += model.vocab_size * model.hidden_size * (1 if model.tied_embeddings else 2)
    m = plan.num_microbatches(instance.job.global_batch_size)
    activation = plan.micro_batch_size * instance.job.seq_len * model.hidden_size * value
    transfers = 0
    for replicas, chain in pipelines:
        if plan.virtual_stages == 1:
            crossings = sum((a in inside) != (b in inside) for a, b in itertools.pairwise(chain))
        else:
            crossings = int(len({name in inside for name in chain}) == 2)
        transfers += replicas * m * crossings
    return params * value + transfers * activation


def _byte_terms(instance: Instance, plan: Plan, synced: _PerLayer,
                pipelines: list[tuple[int, tuple[str, ...]]]) -> list[FloorTerm]:
    """Terms 2, 4 and 5: every cut's ingress over its links, and each building's through its NICs."""
    assert plan.placement is not None
    cluster = instance.cluster
    job_gpus: dict[str, int] = defaultdict(int)
    for share in plan.placement.buildings:
        job_gpus[share.building] += share.dp_replicas * share.pp_stages * plan.tp * plan.cp
    names = frozenset(b.name for b in cluster.buildings)
    terms: list[FloorTerm] = []
    for inside in _cuts(sorted(names)):
        num_bytes = _ingress_bytes(instance, plan, inside, synced, pipelines)
        if num_bytes > 0:
            crossing = [link for link in cluster.links if (link.a in inside) != (link.b in inside)]
            capacity = sum(link.bandwidth_gbps for link in crossing) * 1e9 / 8
            terms.append(FloorTerm(_cut_label(inside, crossing), num_bytes, capacity, num_bytes / capacity))
    for name, gpus in job_gpus.items():
        nics = gpus * cluster.building(name).gpu_spec.nic_bandwidth_gbps * 1e9 / 8
        for direction, cut in (("in", frozenset((name,))), ("out", names - {name})):
            num_bytes = _ingress_bytes(instance, plan, cut, synced, pipelines)
            if num_bytes > 0:
                terms.append(FloorTerm(f"NICs of the {gpus} GPUs in {name} ({direction})", num_bytes, nics,
                                       num_bytes / nics))
    return terms


def physical_floor(instance: Instance, plan: Plan) -> PhysicalFloor:
    """The physical floor of ``plan`` (placement and network filled in) on ``instance``."""
    assert plan.placement is not None, "physical_floor needs a filled plan (fill_defaults)"
    whole_ep_groups = all(share.dp_replicas * plan.cp % plan.ep == 0 for share in plan.placement.buildings)
    synced, flops = _layer_params(instance.job.model_spec, count_experts=whole_ep_groups)
    pipelines = _pipelines(plan)
    terms = (*_compute_terms(instance, plan, flops, pipelines), *_byte_terms(instance, plan, synced, pipelines))
    return PhysicalFloor(max(term.seconds for term in terms), terms)
