"""Memory per GPU: weights, gradients, optimizer states, activations, allowance; plus the plan's layout.

Bytes per parameter follow ZeRO (Rajbhandari et al. 2020): 2 (bf16 weights) + 2 (bf16 grads) + 12
(fp32 master, Adam m and v); ZeRO stage 1 shards the 12 over the data-parallel group (dp·cp ranks;
dp·cp/ep for expert weights), stage 2 also the grads, stage 3 also the weights.

Activations per layer and micro-batch follow Korthikanti et al. 2022 (§4): s·b·h·(34 + 5·a·s/h)
bytes for a GPT layer without parallelism, ÷t with tensor + sequence parallelism, 34·s·b·h/t with
selective recompute, 2·s·b·h/t (layer input only) with full recompute. ``activation_bytes_per_layer``
generalises the 34 to GQA and SwiGLU/MoE MLPs term by term (it gives exactly 34 for a GPT layer);
context parallelism divides s. Flash attention never stores the s×s scores (coefficient
``FLASH_ATTENTION``). Activations are multiplied by the micro-batches in flight on that stage
(``stage_in_flight``).
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass

from ..catalog import coefficients as co
from ..schedules.registry import get_schedule
from ..spec.instance import Instance
from ..spec.job import Precision
from ..spec.model import ModelSpec
from ..spec.plan import Plan, Recompute
from .attention import attention_block
from .compute import LayerKind
from .layout import ResolvedPlan, resolve

GIB = float(1 << 30)


# --------------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParamCount:
    """Parameters one GPU holds, split by how ZeRO shards them (dense over dp·cp, experts over dp·cp/ep)."""

    dense: float
    expert: float

    def __add__(self, other: ParamCount) -> ParamCount:
        return ParamCount(self.dense + other.dense, self.expert + other.expert)


def layer_params(model: ModelSpec, kind: LayerKind, tp: int, ep: int) -> ParamCount:
    """Parameters of one layer on one GPU: attention projections (``cost.attention``: split over heads or, MLA
    down-projections, whole), MLP/tp, experts/(ep·tp), norms and router whole."""
    h = model.hidden_size
    mats = 3 if model.gated_mlp else 2
    dense = attention_block(model).params(tp) + 2 * h
    if kind is LayerKind.DENSE:
        return ParamCount(dense + mats * h * model.ffn_hidden_size / tp, 0.0)
    moe = model.moe
    assert moe is not None
    shared = moe.num_shared_experts * mats * h * moe.expert_ffn_hidden_size / tp
    experts = max(1.0, moe.num_experts / ep) * mats * h * moe.expert_ffn_hidden_size / tp
    return ParamCount(dense + shared + h * moe.num_experts, experts)


def embedding_params(model: ModelSpec, tp: int) -> float:
    """Embedding (or LM head) parameters on one GPU: V·h/tp."""
    return model.vocab_size * model.hidden_size / tp


def stage_params(layout: ResolvedPlan, stage: int) -> list[ParamCount]:
    """Parameters per chunk of ``stage`` on one GPU, embedding and LM head included where they live."""
    model, plan, order = layout.instance.job.model_spec, layout.plan, layout.order
    out = []
    for c, chunk in enumerate(layout.kinds[stage]):
        total = ParamCount(0.0, 0.0)
        for kind, count in Counter(chunk).items():
            layer = layer_params(model, kind, plan.tp, plan.ep)
            total = total + ParamCount(count * layer.dense, count * layer.expert)
        heads = 0.0
        if (stage, c) == order[0]:
            heads += embedding_params(model, plan.tp)
        if (stage, c) == order[-1] and not (model.tied_embeddings and len(order) == 1):
            heads += embedding_params(model, plan.tp)
        out.append(total + ParamCount(heads, 0.0))
    return out


# --------------------------------------------------------------------------------------------------
# Activations
# --------------------------------------------------------------------------------------------------


def activation_bytes_per_layer(
    model: ModelSpec,
    kind: LayerKind,
    seq_len: int,
    micro_batch: int,
    tp: int,
    cp: int,
    recompute: Recompute,
    precision: Precision,
) -> float:
    """Stored activation bytes of one layer for one micro-batch on one GPU (TP with SP, CP).

    Per token (units of h bytes; Korthikanti's terms): norms 4, QKV input 2, Q and K 2(q+kv)/h, V 2kv/h,
    output-projection input 2q/h, dropout mask 1; MLP input 2, hidden 6f/h (SwiGLU gate, up, product) or
    4f/h + mask 1 (GeLU); MoE: routed part × top_k plus shared experts; scores 5·a·s/h unless flash.
    GPT (q = kv = h, f = 4h, GeLU): 34 + 5as/h. Selective: scores dropped. Full: input only, 2.
    MLA (``cost.attention``): Q, K, V at the widths the kernel reads, the output-projection input n·d_v, and
    the latents (each TP rank computes them whole, so not divided by tp): their norm inputs 2·w/h and the
    up-projection inputs 2w/h; selective recompute keeps only the norm inputs (the norms, up-projections and
    so Q, K, V are recomputed).
    FP8: the inputs of the linear layers are kept as 1-byte FP8 copies for the weight-gradient GEMM
    (Transformer Engine caches the casted input), halving those terms.
    """
    s, h = seq_len / cp, model.hidden_size
    sbh = s * micro_batch * h
    if recompute is Recompute.FULL:
        return 2 * sbh / tp
    block = attention_block(model)
    lin = 0.5 if precision is Precision.FP8 else 1.0  # bytes of a stored linear input relative to bf16
    recomputed_up = block.is_mla and recompute is Recompute.SELECTIVE
    qkv = 0.0 if recomputed_up else 2 * (block.score_width + block.k_width + block.v_width) / h
    attention = 4 + 2 * lin + qkv + 2 * lin * block.value_width / h + 1
    latent_units = (2 * block.replicated_outputs
                    + (0.0 if recomputed_up else 2 * lin * sum(block.latent_widths))) / h if block.is_mla else 0.0

    def mlp(f: float) -> float:
        hidden = 4 * f / h + 2 * lin * f / h if model.gated_mlp else 2 * f / h + 2 * lin * f / h + 1
        return 2 * lin + hidden

    if kind is LayerKind.DENSE:
        ffn = mlp(model.ffn_hidden_size)
    else:
        moe = model.moe
        assert moe is not None
        ffn = moe.top_k * mlp(moe.expert_ffn_hidden_size) + (
            mlp(moe.num_shared_experts * moe.expert_ffn_hidden_size) if moe.num_shared_experts else 0.0
        )
    total = (attention + ffn) * sbh
    if recompute is Recompute.NONE and not co.FLASH_ATTENTION:
        total += 5 * model.num_heads * s * seq_len * micro_batch
    return total / tp + latent_units * sbh


# --------------------------------------------------------------------------------------------------
# Memory per GPU
# --------------------------------------------------------------------------------------------------


PEAK_SHAPE_MICROBATCHES_PER_STAGE = 2  # the per-stage shares of the peak stop changing at m ≥ 2·pp


@functools.lru_cache(maxsize=1024)
def stage_in_flight(schedule_name: str, pp: int, virtual_stages: int, num_microbatches: int) -> tuple[float, ...]:
    """Micro-batches in flight per stage: the schedule's worst-stage closed form × each stage's share
    (cached: a search validates hundreds of plans that share a (schedule, pp, v, m)).

    The share is stage s's peak of forwarded-but-not-backpropagated chunks in the op order
    (``PipelineSchedule.peak_live_chunks``) ÷ the largest such peak: 1F1B's stage s holds pp − s, interleaved's
    last stage (v−1)·pp + 1 chunks. The order is read at the least m ≥ 2·pp the schedule runs (or m when smaller):
    the shares do not change beyond (tests: every schedule, pp ≤ 16, v ≤ 4, up to m = 4·pp·v).
    """
    schedule = get_schedule(schedule_name)
    worst = schedule.in_flight_microbatches(pp, virtual_stages, num_microbatches)
    walked = next(m for m in range(min(num_microbatches, PEAK_SHAPE_MICROBATCHES_PER_STAGE * pp), num_microbatches + 1)
                  if schedule.check(pp, virtual_stages, m) is None)
    peaks = schedule.peak_live_chunks(pp, virtual_stages, walked)
    top = max(peaks) or 1
    return tuple(worst * p / top for p in peaks)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Memory of the worst (stage, building) GPU, GiB."""

    stage: int
    building: str
    weights_gib: float
    grads_gib: float
    optimizer_gib: float
    activations_gib: float
    overhead_gib: float
    capacity_gib: float

    @property
    def total_gib(self) -> float:
        """Everything the GPU holds at peak."""
        return (
            self.weights_gib + self.grads_gib + self.optimizer_gib + self.activations_gib + self.overhead_gib
        )

    @property
    def fits(self) -> bool:
        """Whether the peak fits the GPU's HBM."""
        return self.total_gib <= self.capacity_gib


def _stage_memory(layout: ResolvedPlan, stage: int, building: str, in_flight: float) -> MemoryBreakdown:
    instance, plan = layout.instance, layout.plan
    model, job = instance.job.model_spec, instance.job
    dp_group = plan.dp * plan.cp
    expert_group = max(1, dp_group // plan.ep)
    params = stage_params(layout, stage)
    dense = sum(p.dense for p in params)
    expert = sum(p.expert for p in params)

    def sharded(bytes_per_param: float, shard: bool) -> float:
        if not shard:
            return (dense + expert) * bytes_per_param
        return (dense / dp_group + expert / expert_group) * bytes_per_param

    weights = sharded(co.WEIGHT_BYTES, plan.zero_stage >= 3)
    grads = sharded(co.GRAD_BYTES, plan.zero_stage >= 2)
    optimizer = sharded(co.OPTIMIZER_BYTES, plan.zero_stage >= 1)
    kinds = layout.kinds[stage]
    if plan.zero_stage >= 3 and any(kinds):
        biggest = max(
            sum(vars(layer_params(model, k, plan.tp, plan.ep)).values()) for k in {k for chunk in kinds for k in chunk}
        )
        weights += co.ZERO3_GATHERED_LAYERS * biggest * co.WEIGHT_BYTES

    args = (job.seq_len, plan.micro_batch_size, plan.tp, plan.cp)
    per_mb = sum(
        count * activation_bytes_per_layer(model, k, *args, plan.recompute, job.precision)
        for k, count in Counter(k for chunk in kinds for k in chunk).items()
    )
    activations = in_flight * per_mb
    if plan.recompute is Recompute.FULL and any(kinds):  # the layer being recomputed, fully materialised
        activations += max(
            activation_bytes_per_layer(model, k, *args, Recompute.NONE, job.precision)
            for k in {k for chunk in kinds for k in chunk}
        )
    if stage == layout.order[-1][0]:
        tokens = job.seq_len * plan.micro_batch_size / plan.cp
        activations += co.LOGITS_BYTES_PER_ELEMENT * tokens * model.vocab_size / plan.tp
    overhead = co.MEMORY_FIXED_OVERHEAD_GIB + co.MEMORY_FRAGMENTATION_FRACTION * activations / GIB
    capacity = instance.cluster.building(building).gpu_spec.hbm_gib
    return MemoryBreakdown(
        stage, building, weights / GIB, grads / GIB, optimizer / GIB, activations / GIB, overhead, capacity
    )


def layout_memory(layout: ResolvedPlan) -> MemoryBreakdown:
    """Memory of the worst (stage, building) pair: the one with the least headroom (capacity − total)."""
    plan = layout.plan
    pairs = {(s, b) for s, replicas in enumerate(layout.stage_replicas) for b in replicas}
    m = max(1, layout.num_microbatches)
    in_flight = stage_in_flight(plan.schedule, plan.pp, plan.virtual_stages, m)
    breakdowns = [_stage_memory(layout, s, b, in_flight[s]) for s, b in sorted(pairs)]
    return min(breakdowns, key=lambda mb: mb.capacity_gib - mb.total_gib)


def memory_per_gpu(instance: Instance, plan: Plan) -> MemoryBreakdown:
    """``layout_memory`` of ``plan`` (placement and network filled) on ``instance``."""
    return layout_memory(resolve(instance, plan))
