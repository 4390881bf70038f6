"""FLOP counting and the H200-calibrated compute-time model."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from scaleacross_opt.catalog.gpus import gpu_by_name
from scaleacross_opt.cost.compute import (
    LayerKind,
    Shard,
    attention_times,
    layer_flops,
    layer_times,
    lm_head_flops,
    model_flops_per_step,
)
from scaleacross_opt.spec.job import Precision
from scaleacross_opt.spec.model import ModelSpec
from scaleacross_opt.spec.plan import Recompute

ROOT = Path(__file__).resolve().parent.parent
H200 = gpu_by_name("H200-SXM-141GB")
LAYER_CSV = list(csv.DictReader((ROOT / "tests/data/calibration/h200/layer.csv").open()))


def load_model(name: str) -> ModelSpec:
    return ModelSpec(**yaml.safe_load((ROOT / "models" / f"{name}.yaml").read_text()))


def calib_model(row: dict[str, str]) -> ModelSpec:
    return ModelSpec(
        name=row["model"], layers=1, hidden_size=int(row["hidden"]), ffn_hidden_size=int(row["ffn"]),
        num_heads=int(row["heads"]), num_kv_heads=int(row["kv_heads"]), vocab_size=1,
    )


def calib_shard(row: dict[str, str]) -> Shard:
    return Shard(seq_len=int(row["seq"]), micro_batch=int(row["micro_batch"]), tp=int(row["tp"]))


@pytest.mark.parametrize("row", LAYER_CSV, ids=lambda r: f"{r['model']}-tp{r['tp']}-s{r['seq']}")
def test_layer_flops_match_calibration_exactly(row: dict[str, str]) -> None:
    flops = 3 * layer_flops(calib_model(row), LayerKind.DENSE, calib_shard(row))
    assert flops == pytest.approx(float(row["model_flops"]), rel=1e-12)


def test_llama3_8b_layer_flops_pinned() -> None:
    model = load_model("llama3-8b")
    # projections 2·T·h·(q+2kv) + 2·T·q·h, SwiGLU 6·T·h·f, causal core 2·s²·q (T = s = 4096)
    t, h = 4096, 4096
    expected = 2 * t * h * (4096 + 2 * 1024) + 2 * t * 4096 * h + 6 * t * h * 14336 + 2 * t * t * 4096
    assert layer_flops(model, LayerKind.DENSE, Shard(4096, 1)) == expected
    assert 3 * expected == 5772436045824


@pytest.mark.parametrize("row", LAYER_CSV, ids=lambda r: f"{r['model']}-tp{r['tp']}-s{r['seq']}")
def test_h200_layer_time_within_10_percent(row: dict[str, str]) -> None:
    times = layer_times(calib_model(row), LayerKind.DENSE, calib_shard(row), H200)
    measured = float(row["fwdbwd_s"])
    assert abs(times.fwd_s + times.bwd_s - measured) / measured < 0.10


def test_small_shards_are_less_efficient() -> None:
    model = load_model("llama3-8b")

    def achieved(tp: int) -> float:
        shard = Shard(4096, 1, tp=tp)
        times = layer_times(model, LayerKind.DENSE, shard, H200)
        return 3 * layer_flops(model, LayerKind.DENSE, shard) / (times.fwd_s + times.bwd_s)

    assert achieved(8) < 0.8 * achieved(1)


def test_backward_split_and_recompute() -> None:
    model = load_model("llama3-70b")
    shard = Shard(8192, 1, tp=8)
    none = layer_times(model, LayerKind.DENSE, shard, H200)
    selective = layer_times(model, LayerKind.DENSE, shard, H200, recompute=Recompute.SELECTIVE)
    full = layer_times(model, LayerKind.DENSE, shard, H200, recompute=Recompute.FULL)
    attention = attention_times(model, shard, H200)
    assert none.bwd_weight_s < none.bwd_input_s  # attention backward is all input-gradient
    assert selective.bwd_input_s == pytest.approx(none.bwd_input_s + attention.fwd_s)
    assert full.bwd_input_s == pytest.approx(none.bwd_input_s + none.fwd_s)
    assert full.bwd_weight_s == none.bwd_weight_s == selective.bwd_weight_s
    assert full.fwd_s == none.fwd_s


def test_fp8_faster_than_bf16() -> None:
    model = load_model("llama3-70b")
    shard = Shard(8192, 1, tp=4)
    bf16 = layer_times(model, LayerKind.DENSE, shard, H200)
    fp8 = layer_times(model, LayerKind.DENSE, shard, H200, precision=Precision.FP8)
    assert fp8.fwd_s < bf16.fwd_s


def test_moe_flops_follow_top_k_not_expert_count() -> None:
    model = load_model("mixtral-8x22b")
    shard = Shard(4096, 1)
    moe = layer_flops(model, LayerKind.MOE, shard)
    dense_like = model.model_copy(update={"moe": None, "ffn_hidden_size": 2 * 16384})
    # top-2 experts of 16384 ≈ a dense MLP of 32768, plus the router
    assert moe == pytest.approx(layer_flops(dense_like, LayerKind.DENSE, shard) + 2 * 4096 * 6144 * 8)
    ep8 = layer_flops(model, LayerKind.MOE, Shard(4096, 1, ep=8))
    assert ep8 == pytest.approx(moe)  # EP moves experts, not work (balanced routing)


def test_deepseek_shared_experts_and_first_dense_layers() -> None:
    model = load_model("deepseek-v3")
    shard = Shard(4096, 1)
    flops = model_flops_per_step(model, 4096, 1)
    dense = layer_flops(model, LayerKind.DENSE, shard)
    moe = layer_flops(model, LayerKind.MOE, shard)
    assert flops == pytest.approx(3 * (3 * dense + 58 * moe + lm_head_flops(model, shard)))
    # 8 routed + 1 shared expert of 2048 = one FFN of 18432; the MoE layer adds the router
    assert moe == pytest.approx(dense + 2 * 4096 * 7168 * 256)


def test_model_flops_per_step_is_6n_style() -> None:
    model = load_model("llama3-8b")
    tokens = 8192 * 4
    flops = model_flops_per_step(model, 8192, 4)
    expected = 3 * (32 * layer_flops(model, LayerKind.DENSE, Shard(8192, 4)) + 2 * tokens * 4096 * 128256)
    assert flops == pytest.approx(expected)
    params_no_embedding = 8.03e9 - 128256 * 4096
    assert 6 * params_no_embedding * tokens < flops < 1.2 * 6 * params_no_embedding * tokens
