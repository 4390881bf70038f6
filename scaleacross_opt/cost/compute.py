"""FLOPs and compute time of transformer layers on one GPU's shard.

FLOP counts (one forward, one micro-batch of b sequences of s tokens, unsharded, multiply-add = 2):

- attention projections (``cost.attention``): 2·T·in·out per projection, T = b·s tokens; GQA: Q/K/V
  h → q + 2·kv and the output q → h (q = heads·head_dim, kv = kv_heads·head_dim); MLA: down-projections
  (whole on every TP rank), up-projections and the output;
- attention core: QKᵀ 2·b·s²·(score width) and AV 2·b·s²·(value width), halved for causal masking
  (GQA: both widths q);
- dense MLP: 2·T·h·f·3 (SwiGLU: gate, up, down) or 2·T·h·f·2 (GeLU);
- MoE MLP: router 2·T·h·E, routed experts top_k·2·T·h·f_e·(3|2), shared experts likewise;
- LM head: 2·T·h·V; the embedding is a lookup (no FLOPs).

Backward = input-grad (same FLOPs as forward for matmuls, 2× forward for the attention core)
+ weight-grad (same FLOPs as forward for matmuls). Recompute adds the attention core's forward
(selective; Korthikanti et al. 2022), for MLA the up-projections' forward instead (DeepSeek-V3 §3.2.3),
or the whole forward (full) to the backward.

Time = Σ matmul FLOPs ÷ (peak × efficiency) + per-kernel overhead + flash-attention time
+ element-wise bytes ÷ HBM bandwidth, coefficients in ``catalog.coefficients`` (fitted to the H200
calibration). Sharding: TP divides heads, FFN and vocab; CP divides tokens (load-balanced causal
CP keeps the causal halving); EP places E/ep experts per GPU, which receive top_k·T tokens in
expectation (balanced routing); expert weights are also split over TP.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ..catalog import coefficients as co
from ..spec.gpu import GpuSpec
from ..spec.job import Precision
from ..spec.model import ModelSpec
from ..spec.plan import Recompute
from .attention import attention_block


class LayerKind(StrEnum):
    """Kinds of transformer layers with different cost."""

    DENSE = "dense"
    MOE = "moe"


@dataclass(frozen=True)
class Shard:
    """What one GPU computes of one micro-batch: the sequence/batch and the parallel split."""

    seq_len: int
    micro_batch: int
    tp: int = 1
    cp: int = 1
    ep: int = 1

    @property
    def tokens(self) -> float:
        """Tokens of the micro-batch this GPU's CP rank holds: b·s/cp."""
        return self.micro_batch * self.seq_len / self.cp


@dataclass(frozen=True)
class OpTimes:
    """Seconds of one op for one micro-batch: forward, input-gradient and weight-gradient backward."""

    fwd_s: float
    bwd_input_s: float
    bwd_weight_s: float

    @property
    def bwd_s(self) -> float:
        """Full backward."""
        return self.bwd_input_s + self.bwd_weight_s

    def __add__(self, other: OpTimes) -> OpTimes:
        return OpTimes(
            self.fwd_s + other.fwd_s,
            self.bwd_input_s + other.bwd_input_s,
            self.bwd_weight_s + other.bwd_weight_s,
        )

    def scaled(self, factor: float) -> OpTimes:
        """Every part multiplied by ``factor``."""
        return OpTimes(self.fwd_s * factor, self.bwd_input_s * factor, self.bwd_weight_s * factor)


@dataclass(frozen=True)
class Gemm:
    """``count`` matmuls of m×n×k (FLOPs 2·m·n·k each) run as one (grouped) kernel."""

    m: float
    n: float
    k: float
    count: float = 1.0

    @property
    def flops(self) -> float:
        """FLOPs of all ``count`` matmuls."""
        return 2.0 * self.m * self.n * self.k * self.count


def _mlp_matrices(model: ModelSpec) -> int:
    """Weight matrices of one MLP/expert: 3 for SwiGLU, 2 for GeLU."""
    return 3 if model.gated_mlp else 2


def _attention_gemms(model: ModelSpec, shard: Shard, up_only: bool = False) -> list[Gemm]:
    """Forward GEMMs of the attention projections on one GPU (``up_only``: MLA's up-projections)."""
    return [Gemm(shard.tokens, *p.gemm_nk(shard.tp)) for p in attention_block(model).projections if p.up or not up_only]


def layer_gemms(model: ModelSpec, kind: LayerKind, shard: Shard) -> list[Gemm]:
    """Forward matmuls of one layer on one GPU (projections, MLP/experts, router); attention core excluded."""
    h, t = model.hidden_size, shard.tokens
    gemms = _attention_gemms(model, shard)
    mats = _mlp_matrices(model)
    if kind is LayerKind.DENSE:
        f = model.ffn_hidden_size / shard.tp
        gemms += [Gemm(t, (mats - 1) * f, h), Gemm(t, h, f)]
        return gemms
    moe = model.moe
    if moe is None:
        raise ValueError(f"model {model.name} has no MoE layers")
    fe = moe.expert_ffn_hidden_size / shard.tp
    local = max(1.0, moe.num_experts / shard.ep)
    tokens_per_expert = t * moe.top_k * shard.ep / moe.num_experts
    gemms += [Gemm(t, moe.num_experts, h)]  # router (replicated)
    gemms += [Gemm(tokens_per_expert, (mats - 1) * fe, h, local), Gemm(tokens_per_expert, h, fe, local)]
    if moe.num_shared_experts:
        fs = moe.num_shared_experts * moe.expert_ffn_hidden_size / shard.tp
        gemms += [Gemm(t, (mats - 1) * fs, h), Gemm(t, h, fs)]
    return gemms


def attention_core_flops(model: ModelSpec, shard: Shard) -> float:
    """Forward FLOPs of QKᵀ and AV on one GPU, causal (half): b·s²·(score + value width) / (tp·cp)."""
    block = attention_block(model)
    return 1.0 * shard.micro_batch * shard.seq_len**2 * (block.score_width + block.value_width) / (shard.tp * shard.cp)


def layer_flops(model: ModelSpec, kind: LayerKind, shard: Shard) -> float:
    """Model FLOPs of one layer's forward on one GPU (matmuls + causal attention core)."""
    return sum(g.flops for g in layer_gemms(model, kind, shard)) + attention_core_flops(model, shard)


def lm_head_flops(model: ModelSpec, shard: Shard) -> float:
    """Forward FLOPs of the LM head on one GPU: 2·T·h·V/tp."""
    return 2.0 * shard.tokens * model.hidden_size * model.vocab_size / shard.tp


def layer_kinds(model: ModelSpec) -> list[LayerKind]:
    """Kind of every layer in model order (leading dense layers, then MoE)."""
    if model.moe is None:
        return [LayerKind.DENSE] * model.layers
    dense = model.moe.first_dense_layers
    return [LayerKind.DENSE] * dense + [LayerKind.MOE] * (model.layers - dense)


def model_flops_per_step(model: ModelSpec, seq_len: int, global_batch_size: int) -> float:
    """Model FLOPs of one training step: 3 × forward (fwd + 2× bwd) of all layers and the LM head.

    The standard MFU convention (Chowdhery et al. 2022, PaLM App. B; Narayanan et al. 2021 without the
    recompute term): causal attention counted as half, no recompute, embedding lookup free.
    """
    shard = Shard(seq_len=seq_len, micro_batch=global_batch_size)
    forward = sum(layer_flops(model, kind, shard) for kind in layer_kinds(model)) + lm_head_flops(
        model, shard
    )
    return 3.0 * forward


def _efficiency(gpu: GpuSpec) -> float:
    """GPU-specific multiplier of the H200-calibrated efficiencies."""
    return co.GPU_EFFICIENCY_FACTOR.get(gpu.name, co.DEFAULT_GPU_EFFICIENCY_FACTOR)


def _gemm_rate(gpu: GpuSpec, precision: Precision) -> float:
    """Achieved matmul FLOP/s of large GEMMs: peak × GEMM_EFFICIENCY (× FP8 ratio at the FP8 peak)."""
    eff = co.GEMM_EFFICIENCY * _efficiency(gpu)
    if precision is Precision.FP8:
        return gpu.peak_fp8_tflops * 1e12 * eff * co.FP8_GEMM_EFFICIENCY_RATIO
    return gpu.peak_bf16_tflops * 1e12 * eff


def gemm_time_s(gemms: list[Gemm], gpu: GpuSpec, precision: Precision) -> float:
    """Σ FLOPs ÷ achieved rate + a kernel overhead per (grouped) kernel + a per-expert extra when grouped."""
    rate = _gemm_rate(gpu, precision)
    return sum(
        g.flops / rate + co.GEMM_KERNEL_OVERHEAD_S + (g.count - 1) * co.GROUPED_GEMM_PER_EXPERT_S
        for g in gemms
    )


def attention_times(model: ModelSpec, shard: Shard, gpu: GpuSpec) -> OpTimes:
    """Flash-attention core (bf16): hardware FLOPs F·(1 + 2.5) at the fitted efficiency + overhead.

    Split forward : backward as 1 : 2.5 (FlashAttention-2 backward recomputes QKᵀ); all backward time
    is input-gradient (no weights).
    """
    flops = attention_core_flops(model, shard)
    rate = gpu.peak_bf16_tflops * 1e12 * co.ATTENTION_EFFICIENCY * _efficiency(gpu)
    total = flops * (1 + co.FLASH_BWD_FLOPS_RATIO) / rate + co.ATTENTION_OVERHEAD_S
    fwd = total / (1 + co.FLASH_BWD_FLOPS_RATIO)
    return OpTimes(fwd, total - fwd, 0.0)


def elementwise_fwd_s(model: ModelSpec, shard: Shard, gpu: GpuSpec) -> float:
    """Forward memory-bound work of a layer: ELEMENTWISE_PASSES × T·h bf16 bytes ÷ HBM bandwidth.

    Not divided by TP: without sequence parallelism every TP rank normalises the full sequence (the
    calibration's setting); with it, the all-gathered activations are touched at full size too.
    """
    bytes_ = co.ELEMENTWISE_PASSES * shard.tokens * model.hidden_size * 2
    return bytes_ / (gpu.hbm_bandwidth_gb_per_s * 1e9)


def _selective_recompute_s(model: ModelSpec, shard: Shard, gpu: GpuSpec, precision: Precision,
                           attention: OpTimes) -> float:
    """Backward extra of selective recompute: the attention core's forward, or an MLA layer's up-projections."""
    block = attention_block(model)
    if not block.is_mla:
        return attention.fwd_s
    return gemm_time_s(_attention_gemms(model, shard, up_only=True), gpu, precision)


def layer_times(
    model: ModelSpec,
    kind: LayerKind,
    shard: Shard,
    gpu: GpuSpec,
    precision: Precision = Precision.BF16,
    recompute: Recompute = Recompute.NONE,
) -> OpTimes:
    """Compute seconds of one layer for one micro-batch on one GPU (no communication).

    fwd = matmuls + attention + element-wise; bwd_input = the same matmuls again (data grads) +
    attention backward + 2× element-wise + recompute (selective: the attention forward, for MLA the
    up-projections' forward; full: the whole forward); bwd_weight = the matmuls again (weight grads).
    """
    matmul = gemm_time_s(layer_gemms(model, kind, shard), gpu, precision)
    attention = attention_times(model, shard, gpu)
    elementwise = elementwise_fwd_s(model, shard, gpu)
    fwd = matmul + attention.fwd_s + elementwise
    extra = {Recompute.NONE: 0.0, Recompute.SELECTIVE: _selective_recompute_s(model, shard, gpu, precision, attention),
             Recompute.FULL: fwd}[recompute]
    return OpTimes(fwd, matmul + attention.bwd_input_s + 2 * elementwise + extra, matmul)


def lm_head_times(
    model: ModelSpec, shard: Shard, gpu: GpuSpec, precision: Precision = Precision.BF16
) -> OpTimes:
    """LM head + cross-entropy: one T×h×V/tp matmul per pass, plus the logits' memory-bound softmax.

    Softmax/loss touch the fp32 logits LOGITS_BYTES_PER_ELEMENT bytes per entry in forward and again in
    backward. FP8 jobs run the head at the BF16 rate unless FP8_OUTPUT_LAYER (frameworks keep it in BF16).
    """
    gemm = [Gemm(shard.tokens, model.vocab_size / shard.tp, model.hidden_size)]
    if precision is Precision.FP8 and not co.FP8_OUTPUT_LAYER:
        precision = Precision.BF16
    matmul = gemm_time_s(gemm, gpu, precision)
    softmax = (
        co.LOGITS_BYTES_PER_ELEMENT
        * shard.tokens
        * model.vocab_size
        / shard.tp
        / (gpu.hbm_bandwidth_gb_per_s * 1e9)
    )
    return OpTimes(matmul + softmax, matmul + softmax, matmul)


def embedding_times(model: ModelSpec, shard: Shard, gpu: GpuSpec) -> OpTimes:
    """Embedding lookup (read T·h bf16) and its scatter-add gradient (read + write): memory-bound."""
    bytes_ = shard.tokens * model.hidden_size * 2
    bw = gpu.hbm_bandwidth_gb_per_s * 1e9
    return OpTimes(bytes_ / bw, 0.0, 2 * bytes_ / bw)
