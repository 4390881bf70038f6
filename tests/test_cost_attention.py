"""Attention blocks: GQA as before, MLA (DeepSeek-V3) by its published sizes, TP and recompute semantics."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from scaleacross_opt.catalog.gpus import gpu_by_name
from scaleacross_opt.cost.attention import TpSplit, attention_block
from scaleacross_opt.cost.compute import LayerKind, Shard, layer_kinds, layer_times
from scaleacross_opt.cost.memory import activation_bytes_per_layer, embedding_params, layer_params
from scaleacross_opt.io import MODELS_DIR
from scaleacross_opt.io import load_model as load_model_file
from scaleacross_opt.spec import ModelSpec, Precision
from scaleacross_opt.spec.plan import Recompute
from scaleacross_opt.validation import physical_floor


def load_model(name: str) -> ModelSpec:
    return load_model_file(MODELS_DIR / f"{name}.yaml")


def _total_params(model: ModelSpec) -> float:
    layers = sum(sum(vars(layer_params(model, kind, 1, 1)).values()) for kind in layer_kinds(model))
    return layers + 2 * embedding_params(model, 1)


def test_deepseek_v3_has_its_published_671b_and_37b_activated_parameters() -> None:
    """DeepSeek-V3 report, Table 1 / §1: 671B total, 37B activated per token (the MTP module excluded)."""
    model = load_model("deepseek-v3")
    assert _total_params(model) == pytest.approx(671e9, rel=0.005)
    moe = layer_params(model, LayerKind.MOE, 1, model.moe.num_experts)
    dense = layer_params(model, LayerKind.DENSE, 1, 1)
    per_expert = moe.expert  # one routed expert per GPU at ep = num_experts
    activated = (model.moe.first_dense_layers * dense.dense
                 + (model.layers - model.moe.first_dense_layers) * (moe.dense + model.moe.top_k * per_expert)
                 + 2 * embedding_params(model, 1))
    assert activated == pytest.approx(37e9, rel=0.03)


def test_gqa_block_keeps_the_fused_qkv_and_output_projections() -> None:
    model = load_model("llama3-70b")
    h, d = model.hidden_size, model.head_dim_resolved
    q, kv = model.num_heads * d, model.num_kv_heads * d
    block = attention_block(model)
    assert not block.is_mla
    assert block.params(8) == pytest.approx((h * (q + 2 * kv) + q * h) / 8)
    assert (block.score_width, block.k_width, block.v_width) == (q, kv, kv)


def test_mla_down_projections_stay_whole_under_tp() -> None:
    """TP splits the up- and output projections over heads; every TP rank holds the latent down-projections."""
    block = attention_block(load_model("deepseek-v3"))
    down = [p for p in block.projections if p.split is TpSplit.REPLICATED]
    assert [(p.in_features, p.out_features) for p in down] == [(7168, 1536), (7168, 512 + 64)]
    split = sum(p.in_features * p.out_features for p in block.projections if p.split is not TpSplit.REPLICATED)
    whole = sum(p.in_features * p.out_features for p in down) + sum(block.latent_widths)
    assert block.params(8) == pytest.approx(split / 8 + whole)
    assert (block.score_width, block.value_width) == (128 * 192, 128 * 128)


def test_mla_selective_recompute_trades_stored_qkv_for_up_projection_time() -> None:
    model = load_model("deepseek-v3")
    shard = Shard(seq_len=4096, micro_batch=1)
    kept, recomputed = (activation_bytes_per_layer(model, LayerKind.MOE, 4096, 1, 1, 1, recompute, Precision.BF16)
                        for recompute in (Recompute.NONE, Recompute.SELECTIVE))
    block = attention_block(model)
    qkv_bytes = 2 * (block.score_width + block.k_width + block.v_width) * 4096
    latents_bf16 = 2 * sum(block.latent_widths) * 4096
    assert kept - recomputed == pytest.approx(qkv_bytes + latents_bf16)
    gpu = gpu_by_name("H800")
    none, selective = (layer_times(model, LayerKind.MOE, shard, gpu, recompute=r)
                       for r in (Recompute.NONE, Recompute.SELECTIVE))
    assert selective.fwd_s == none.fwd_s and selective.bwd_weight_s == none.bwd_weight_s
    assert 0 < selective.bwd_input_s - none.bwd_input_s < 0.2 * none.fwd_s  # two small GEMMs, not the core


def test_floor_and_cost_model_count_the_same_mla_weights() -> None:
    """The physical floor counts attention weights with its own formula: it must agree with the cost model."""
    for name in ("deepseek-v3", "llama3-405b"):
        model = load_model(name)
        floor = physical_floor._attention_params(model)
        cost = sum(p.in_features * p.out_features for p in attention_block(model).projections)
        assert floor == pytest.approx(cost), name


def test_mla_requires_one_kv_head_per_head() -> None:
    spec = load_model("deepseek-v3").model_dump()
    spec["num_kv_heads"] = 8
    with pytest.raises(ValidationError, match="num_kv_heads=8 must equal num_heads=128"):
        ModelSpec.model_validate(spec)
