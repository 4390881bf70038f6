"""Transformer architecture description (decoder-only, GQA or MLA attention, SwiGLU MLP, optional MoE)."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from . import bounds as B
from .base import StrictModel


class MoeSpec(StrictModel):
    """Mixture-of-experts feed-forward layers (top-k routed experts plus always-on shared experts)."""

    num_experts: int = Field(ge=2, le=B.MAX_EXPERTS, description="Routed experts per MoE layer (≤ 2^16).")
    top_k: int = Field(ge=1, le=B.MAX_TOP_K, description="Routed experts each token is sent to (≤ 1024).")
    expert_ffn_hidden_size: int = Field(ge=1, le=B.MAX_WIDTH, description="FFN hidden size of one expert (≤ 2^20).")
    num_shared_experts: int = Field(
        default=0, ge=0, le=B.MAX_EXPERTS, description="Shared experts every token uses (≤ 2^16)."
    )
    first_dense_layers: int = Field(
        default=0, ge=0, le=B.MAX_LAYERS, description="Leading layers that use a dense MLP instead of MoE (≤ 1024)."
    )


class MlaSpec(StrictModel):
    """Multi-head Latent Attention (DeepSeek-V2, arXiv 2405.04434 §2.1; DeepSeek-V3, arXiv 2412.19437 §2.1.1).

    Queries: h → q_lora_rank (down-projection, RMSNorm) → heads·(qk_nope + qk_rope) (up-projection), or
    h → heads·(qk_nope + qk_rope) directly without a query latent. Keys/values: h → kv_lora_rank + qk_rope
    (the latent and one rotary key shared by all heads; RMSNorm on the latent) → heads·(qk_nope + v)
    (up-projection). Output: heads·v → h. Scores use qk_nope + qk_rope dimensions per head, values v.
    """

    q_lora_rank: int | None = Field(
        default=None, ge=1, le=B.MAX_WIDTH,
        description="Query latent (down-projection) width (≤ 2^20); absent: queries projected from h directly.",
    )
    kv_lora_rank: int = Field(ge=1, le=B.MAX_WIDTH, description="Key/value latent width, the cached vector (≤ 2^20).")
    qk_nope_head_dim: int = Field(
        ge=1, le=B.MAX_WIDTH, description="Per-head query/key dimension without RoPE (≤ 2^20)."
    )
    qk_rope_head_dim: int = Field(
        ge=0, le=B.MAX_WIDTH, description="Per-head query/key dimension carrying RoPE; the key part is shared (≤ 2^20)."
    )
    v_head_dim: int = Field(ge=1, le=B.MAX_WIDTH, description="Per-head value dimension (≤ 2^20).")

    @property
    def qk_head_dim(self) -> int:
        """Per-head query/key dimension of the scores: qk_nope + qk_rope."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class ModelSpec(StrictModel):
    """A decoder-only transformer. Dense MLP layers use ``ffn_hidden_size`` (SwiGLU: 3 matrices)."""

    name: str = Field(description="Identifier, e.g. 'llama3-70b'.", min_length=1)
    layers: int = Field(ge=1, le=B.MAX_LAYERS, description="Number of transformer layers (≤ 1024).")
    hidden_size: int = Field(ge=1, le=B.MAX_WIDTH, description="Model (residual stream) width h (≤ 2^20).")
    ffn_hidden_size: int = Field(ge=1, le=B.MAX_WIDTH, description="Hidden size of the dense MLP (≤ 2^20).")
    num_heads: int = Field(ge=1, le=B.MAX_HEADS, description="Query attention heads (≤ 2^14).")
    num_kv_heads: int = Field(
        ge=1, le=B.MAX_HEADS, description="Key/value heads (GQA); equal to num_heads for MHA (≤ 2^14)."
    )
    head_dim: int | None = Field(
        default=None, ge=1, le=B.MAX_WIDTH, description="Per-head dimension (≤ 2^20); default hidden_size / num_heads."
    )
    vocab_size: int = Field(ge=1, le=B.MAX_VOCAB, description="Vocabulary size (embedding and LM-head rows; ≤ 2^24).")
    tied_embeddings: bool = Field(default=False, description="LM head shares the embedding matrix.")
    gated_mlp: bool = Field(
        default=True, description="SwiGLU (3 matrices) if true, GeLU MLP (2 matrices) if false."
    )
    moe: MoeSpec | None = Field(default=None, description="MoE settings; absent for a dense model.")
    mla: MlaSpec | None = Field(
        default=None,
        description="Multi-head Latent Attention; absent for MHA/GQA. When set, num_heads counts the MLA heads, "
        "num_kv_heads must equal num_heads and head_dim is unused by the cost model.",
    )
    source: str = Field(default="", description="Paper or config the architecture comes from.")

    @model_validator(mode="after")
    def _mla_heads(self) -> Self:
        """MLA up-projects keys and values for every head: num_kv_heads must equal num_heads."""
        if self.mla is not None and self.num_kv_heads != self.num_heads:
            raise ValueError(
                f"mla: num_kv_heads={self.num_kv_heads} must equal num_heads={self.num_heads} (MLA has no GQA groups)"
            )
        return self

    @property
    def head_dim_resolved(self) -> int:
        """Per-head dimension, defaulting to hidden_size / num_heads."""
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        return 0 if self.moe is None else self.layers - self.moe.first_dense_layers
