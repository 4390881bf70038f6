"""The attention block of one layer as projections and widths: MHA/GQA or MLA.

MHA/GQA (q = heads·head_dim, kv = kv_heads·head_dim): one fused QKV projection h → q + 2kv (TP splits its
output over heads) and the output projection q → h (TP splits its input). Scores and values use q.

MLA (DeepSeek-V2, arXiv 2405.04434 §2.1; DeepSeek-V3, arXiv 2412.19437 §2.1.1), n heads, per head
d_nope + d_rope query/key dimensions and d_v value dimensions:
- down-projections h → q_lora (queries; absent without a query latent) and h → kv_lora + d_rope (the
  key/value latent and one rotary key shared by all heads), each latent RMS-normalised. TP does not split
  them: every TP rank holds and computes them whole (Megatron-Core builds them as duplicated linears);
- up-projections q_lora (or h) → n·(d_nope + d_rope) and kv_lora → n·(d_nope + d_v), split over heads;
- output projection n·d_v → h, its input split over heads.
Scores use n·(d_nope + d_rope) dimensions, values n·d_v; K as attention reads it is n·(d_nope + d_rope)
wide (the shared rotary key broadcast to every head), V n·d_v.

Selective recompute of an MLA layer recomputes the latents' norms and the up-projections in the backward
instead of storing their outputs (DeepSeek-V3 §3.2.3; Megatron-Bridge's ``mla_up_proj`` recompute module).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache

from ..spec.model import ModelSpec


class TpSplit(StrEnum):
    """How tensor parallelism shards a projection's weight."""

    COLUMN = "column"  # output features split (heads)
    ROW = "row"  # input features split
    REPLICATED = "replicated"  # every TP rank holds it whole


@dataclass(frozen=True)
class Projection:
    """One weight matrix of the attention block: in → out features."""

    in_features: int
    out_features: int
    split: TpSplit
    up: bool = False  # an MLA up-projection (recomputed by selective recompute)

    def gemm_nk(self, tp: int) -> tuple[float, float]:
        """(output features, reduction length) of its GEMM on one GPU."""
        if self.split is TpSplit.COLUMN:
            return self.out_features / tp, self.in_features
        if self.split is TpSplit.ROW:
            return self.out_features, self.in_features / tp
        return self.out_features, self.in_features


@dataclass(frozen=True)
class AttentionBlock:
    """Projections and widths (features per token, unsharded) of one layer's attention."""

    projections: tuple[Projection, ...]
    score_width: int  # heads × per-head query/key dimension (QKᵀ)
    value_width: int  # heads × per-head value dimension (AV)
    k_width: int  # K as the attention kernel reads it
    v_width: int  # V as the attention kernel reads it
    latent_widths: tuple[int, ...]  # MLA: the normalised latents (q_lora, kv_lora); empty for GQA
    replicated_outputs: int = field(init=False)  # output features of the projections TP keeps whole
    _split_params: int = field(init=False, repr=False)
    _whole_params: int = field(init=False, repr=False)

    def __post_init__(self) -> None:  # the sums the per-layer cost and memory paths read (hot: cached here)
        split = sum(p.in_features * p.out_features for p in self.projections if p.split is not TpSplit.REPLICATED)
        whole = sum(p.in_features * p.out_features for p in self.projections if p.split is TpSplit.REPLICATED)
        object.__setattr__(self, "_split_params", split)
        object.__setattr__(self, "_whole_params", whole + sum(self.latent_widths))
        object.__setattr__(self, "replicated_outputs",
                           sum(p.out_features for p in self.projections if p.split is TpSplit.REPLICATED))

    def params(self, tp: int) -> float:
        """Projection weights plus the latents' RMSNorm weights (whole on every TP rank) on one GPU."""
        return self._split_params / tp + self._whole_params

    @property
    def is_mla(self) -> bool:
        return bool(self.latent_widths)


@lru_cache(maxsize=64)  # on every layer's cost and memory path; a frozen ModelSpec hashes in < 1 µs
def attention_block(model: ModelSpec) -> AttentionBlock:
    """The attention block of ``model`` (see the module docstring)."""
    h, mla = model.hidden_size, model.mla
    if mla is None:
        q = model.num_heads * model.head_dim_resolved
        kv = model.num_kv_heads * model.head_dim_resolved
        return AttentionBlock(
            projections=(Projection(h, q + 2 * kv, TpSplit.COLUMN), Projection(q, h, TpSplit.ROW)),
            score_width=q, value_width=q, k_width=kv, v_width=kv, latent_widths=(),
        )
    n = model.num_heads
    scores, values = n * mla.qk_head_dim, n * mla.v_head_dim
    queries = ((Projection(h, mla.q_lora_rank, TpSplit.REPLICATED),
                Projection(mla.q_lora_rank, scores, TpSplit.COLUMN, up=True))
               if mla.q_lora_rank is not None else (Projection(h, scores, TpSplit.COLUMN),))
    keys_values = (Projection(h, mla.kv_lora_rank + mla.qk_rope_head_dim, TpSplit.REPLICATED),
                   Projection(mla.kv_lora_rank, n * (mla.qk_nope_head_dim + mla.v_head_dim), TpSplit.COLUMN, up=True))
    latents = ((mla.q_lora_rank,) if mla.q_lora_rank is not None else ()) + (mla.kv_lora_rank,)
    return AttentionBlock(
        projections=(*queries, *keys_values, Projection(values, h, TpSplit.ROW)),
        score_width=scores, value_width=values, k_width=scores, v_width=values, latent_widths=latents,
    )
