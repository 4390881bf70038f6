"""TP communication overlap (Plan.tp_comm_overlap), NVLink protocol efficiency, collectives repeated by
full recompute, and the BF16 LM head of FP8 jobs: each moves the estimate and the simulation alike."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import scaleacross_opt.schedules.one_f_one_b  # noqa: F401  (registers 1f1b)
from scaleacross_opt.catalog import coefficients as co
from scaleacross_opt.catalog.gpus import gpu_by_name
from scaleacross_opt.catalog.network import DEFAULT_TRAFFIC_CLASS
from scaleacross_opt.cost.collectives import ring_half_s
from scaleacross_opt.cost.compute import LayerKind, Shard, gemm_time_s, layer_gemms, lm_head_times
from scaleacross_opt.cost.step import build_workload, estimate, layer_comm, nvlink_path, tp_exposed_s
from scaleacross_opt.simulator import simulate
from scaleacross_opt.spec import (
    Building,
    BuildingShare,
    Cluster,
    CrossBuilding,
    Instance,
    Job,
    ModelSpec,
    NetworkConfig,
    Placement,
    Plan,
    Precision,
    Recompute,
)

ROOT = Path(__file__).resolve().parent.parent
MODEL = ModelSpec(**yaml.safe_load((ROOT / "models" / "llama3-70b.yaml").read_text()))
H100 = gpu_by_name("H100-SXM-80GB")


def _instance(precision: Precision = Precision.BF16) -> Instance:
    cluster = Cluster(buildings=[Building(name="dc", gpu="H100-SXM-80GB", num_gpus=64)])
    return Instance(cluster=cluster, job=Job(model=MODEL, seq_len=4096, global_batch_size=32, precision=precision))


def _plan(**update: object) -> Plan:
    network = NetworkConfig(intra_building=DEFAULT_TRAFFIC_CLASS, cross_building=DEFAULT_TRAFFIC_CLASS)
    base = Plan(
        tp=8, pp=2, dp=4, micro_batch_size=1, schedule="1f1b", recompute="selective",
        placement=Placement(cross_building=CrossBuilding.NONE,
                            buildings=[BuildingShare(building="dc", dp_replicas=4, pp_stages=2)],
                            layers_per_stage=[40, 40]),
        network=network,
    )
    return base.model_copy(update=update)


def test_tp_comm_overlap_defaults_off() -> None:
    assert _plan().tp_comm_overlap is False
    inst = _instance()
    assert estimate(inst, _plan()).step_time_s == estimate(inst, _plan(tp_comm_overlap=False)).step_time_s


def test_tp_comm_overlap_shortens_estimate_and_simulation() -> None:
    inst = _instance()
    off, on = _plan(), _plan(tp_comm_overlap=True)
    est_off, est_on = estimate(inst, off), estimate(inst, on)
    sim_off, sim_on = simulate(inst, off), simulate(inst, on)
    assert est_on.breakdown["exposed_tp_s"] < 0.5 * est_off.breakdown["exposed_tp_s"]
    assert est_on.step_time_s < est_off.step_time_s
    assert sim_on.breakdown["exposed_tp_s"] < 0.5 * sim_off.breakdown["exposed_tp_s"]
    assert sim_on.step_time_s < sim_off.step_time_s
    # the shared workload: every op gets shorter by exactly the TP exposure it no longer carries
    w_off, w_on = build_workload(inst, off), build_workload(inst, on)
    assert (w_on.groups[0].fwd_s < w_off.groups[0].fwd_s).all()
    assert (w_on.groups[0].bwd_s < w_off.groups[0].bwd_s).all()
    m = w_off.num_microbatches
    saved = (w_off.groups[0].fwd_s + w_off.groups[0].bwd_s - w_on.groups[0].fwd_s - w_on.groups[0].bwd_s).sum(axis=1)
    assert m * saved.max() == pytest.approx(w_off.exposed_comm_s["tp"] - w_on.exposed_comm_s["tp"])


def test_tp_exposed_s_limits() -> None:
    """Short collectives hide entirely but for the last reduce-scatter chunk of each forward RS; long
    ones expose what their GEMM cannot cover."""
    shard = Shard(4096, 1, tp=8)
    gemms = [gemm_time_s([g], H100, Precision.BF16) for g in layer_gemms(MODEL, LayerKind.DENSE, shard)]
    tiny = 1e-6 * min(gemms)
    fwd, bwd = tp_exposed_s(tiny, MODEL, LayerKind.DENSE, shard, H100, Precision.BF16)
    assert fwd == pytest.approx(2 * tiny / co.TP_OVERLAP_RS_SPLITS)
    assert bwd == 0.0
    huge = 1e3 * max(gemms)
    fwd, bwd = tp_exposed_s(huge, MODEL, LayerKind.DENSE, shard, H100, Precision.BF16)
    n = co.TP_OVERLAP_RS_SPLITS
    assert bwd == pytest.approx(4 * huge - sum(gemms[:4]))
    assert fwd == pytest.approx(4 * huge - gemms[0] - gemms[2] - (gemms[1] + gemms[3]) * (n - 1) / n)


def test_nvlink_runs_at_protocol_efficiency() -> None:
    building = Building(name="dc", gpu="H100-SXM-80GB", num_gpus=8)
    assert nvlink_path(building).bandwidth_bytes_per_s == pytest.approx(
        H100.nvlink_bandwidth_gb_per_s * 1e9 * co.NVLINK_PROTOCOL_EFFICIENCY
    )
    inst = _instance()
    act = 4096 * MODEL.hidden_size * 2
    expected = 4 * ring_half_s(8, act, nvlink_path(building).bandwidth_bytes_per_s, co.NVLINK_LATENCY_US * 1e-6)
    fwd, _ = layer_comm(inst, _plan(), inst.cluster.building("dc"), LayerKind.DENSE)["tp"]
    assert fwd == pytest.approx(expected)


@pytest.mark.parametrize("overlap", [False, True])
def test_full_recompute_repeats_forward_collectives(overlap: bool) -> None:
    inst = _instance()
    building = inst.cluster.building("dc")
    selective = layer_comm(inst, _plan(tp_comm_overlap=overlap), building, LayerKind.DENSE)
    full = layer_comm(inst, _plan(tp_comm_overlap=overlap, recompute=Recompute.FULL), building, LayerKind.DENSE)
    for name, (f, b) in selective.items():
        assert full[name] == pytest.approx((f, b + f))
    assert full["tp"][1] > selective["tp"][1]
    full_plan = _plan(recompute=Recompute.FULL)
    est = estimate(inst, full_plan)
    sim = simulate(inst, full_plan)
    no_repeat = estimate(inst, _plan(recompute=Recompute.SELECTIVE))
    assert est.breakdown["exposed_tp_s"] > no_repeat.breakdown["exposed_tp_s"]
    assert sim.breakdown["exposed_tp_s"] == pytest.approx(est.breakdown["exposed_tp_s"])


def test_fp8_job_keeps_lm_head_in_bf16() -> None:
    shard = Shard(4096, 1, tp=8)
    assert not co.FP8_OUTPUT_LAYER
    fp8, bf16 = lm_head_times(MODEL, shard, H100, Precision.FP8), lm_head_times(MODEL, shard, H100, Precision.BF16)
    assert fp8 == bf16
    # transformer layers still run faster in FP8
    est_fp8, est_bf16 = estimate(_instance(Precision.FP8), _plan()), estimate(_instance(), _plan())
    assert est_fp8.step_time_s < est_bf16.step_time_s
