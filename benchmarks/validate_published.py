"""Predict every published training run in data/published_runs.csv and compare with what was measured.

Run: ``python benchmarks/validate_published.py`` (from the repository root). Prints one row per run
(predicted vs measured tokens/s per GPU, % error, memory fit, reason when off by > 30 %), the skipped
rows with why, and LAST the median absolute % error on throughput.

Comparison is on tokens/s per GPU, converting each source's own metric with that source's own FLOP
formula (like with like): Narayanan et al. 2021 TFLOP/s with their Eq. 3 (which counts the recompute
forward: 96·B·s·l·h²·(1 + s/6h + V/16lh)); Korthikanti et al. 2022 MFU with their model-FLOP formula
(72·B·s·l·h²·(1 + s/6h + V/12lh)); Llama 3 (Meta 2024) TFLOP/s with the PaLM MFU count it cites
(Chowdhery et al.: 6N + 12·L·H·Q·T per token, N = all parameters, attention not causal-halved); NeMo
24.03 long-sequence TFLOPS with that release's llama2 formula (l·h²·(12 + 12·kv/a + 18·f/h + 12·s/h +
6·32000/(l·h)) per token); step times with tokens per step; FP8 rows on tokens/s.

Defaults for cells a source leaves blank (documented, never tuned to a row):
- seq_len 8192 (torchtitan's Llama 3 default), micro-batch 1 (Megatron), cp/ep/virtual stages 1;
- dims of named models from their public configs (MODELS and MODEL_FILES below), ffn 4h for GPT-style rows;
- a printed DP that contradicts the GPU count (Llama 3 Table 4's CP16 row: 8·16·16·4 ≠ 16,384) → GPUs/(TP·CP·PP);
- micro-batch for torchtitan = local batch (from the notes) ÷ micro-batches, which torchtitan sets to
  the number of pipeline stages (``pipeline_parallel_microbatches`` default); no PP → one micro-batch;
- TP communication overlap (Transformer Engine userbuffers) only where the run's config enables it:
  NeMo rows per NEMO_TP_COMM_OVERLAP (launcher configs / NeMo 2.0 recipes), Megatron-Bridge rows per
  MBRIDGE_TP_COMM_OVERLAP (recipe CommOverlapConfig), torchtitan rows whose notes say AsyncTP (its opt-in
  micro-pipelined all-gather-matmul / matmul-reduce-scatter); none for Megatron-LM 2021/2022 and
  Megatron-DeepSpeed/BLOOM 2022 (predate it), the Nemotron-4 15B report and the Llama 3 paper (not stated);
- DP gradient sync: Megatron-LM 2021/2022 all-reduce after the backward (``--overlap-grad-reduce`` came
  in Sept 2023, NVIDIA/Megatron-LM#391) and Megatron-DeepSpeed (DeepSpeed's pipeline engine reduces
  gradients after the last micro-batch); every other framework overlaps it with the backward;
- ZeRO: Megatron-LM 2021/2022 none (0); NeMo/Nemotron and Megatron-Bridge distributed optimizer,
  Megatron-DeepSpeed's BF16_Optimizer ("its own ZeRO stage 1") and DeepSeek's ZeRO-1 DP (1); Llama 3's FSDP
  that shards gradients and optimizer states but does not reshard weights after forward (2); DeepSpeed
  ZeRO-3, torchtitan FSDP and Megatron-Bridge rows with FSDP=1 (Megatron-FSDP) (3);
- recompute blank → none; a cell naming the MLA up-projection (DeepSeek-V3: RMSNorm and MLA up-projection)
  → selective, which for an MLA model recomputes exactly those (``cost.attention``);
- schedule 1F1B, interleaved 1F1B when v > 1; DeepSeek-V3's DualPipe → the registered ``dualpipe`` schedule
  (its DualPipeV form, v = 2, one parameter copy);
- EP must divide DP·CP (EP reuses the DP·CP ranks); rows whose EP group spans TP × DP ranks (Megatron-Core
  "parallel folding") cannot be expressed and are skipped, as is any plan ``check_plan`` rejects;
- torchtitan's "selective" AC (per-op SAC or every other layer) stores far less than Korthikanti's
  selective recompute; Recompute has no such value and FULL is the nearest in memory (its recompute
  FLOPs over-charge those rows by about half a forward pass);
- GPUs: DGX B200 → ``B200``, DGX GB200 (NVL72 racks) → ``GB200-NVL72``, H800 → ``H800``; Jean Zay's A100
  nodes (BLOOM) carry 4×100 Gb/s Omni-Path per 8 GPUs → A100-80GB with a 50 Gb/s NIC;
- network: InfiniBand clusters (Selene, DGX, DeepSeek's H800 cluster) run adaptive routing with
  credit-based flow control → packet spraying + receiver-driven + selective repeat (Omni-Path treated
  alike); Meta's Grand Teton RoCE (torchtitan benchmarks, Llama 3 405B) → ECMP with 16 QPs (Gangidi et al.
  2024), receiver-driven admission, go-back-N;
- GB-batch missing for Korthikanti's 530B-on-2240-GPU MFU rows → 2240, the batch Narayanan et al. 2021
  Table 2 used for that shape and GPU count.
"""

from __future__ import annotations

import csv
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

import scaleacross_opt.schedules  # noqa: F401  (registers every schedule: 1f1b, interleaved-1f1b, dualpipe, ...)
from scaleacross_opt.catalog.gpus import gpu_by_name
from scaleacross_opt.cost.memory import MemoryBreakdown, memory_per_gpu
from scaleacross_opt.cost.step import estimate
from scaleacross_opt.plan_defaults import even_layers
from scaleacross_opt.spec import (
    Building,
    BuildingShare,
    Cluster,
    CollectiveAlgorithm,
    CongestionControl,
    CrossBuilding,
    DpSync,
    GpuSpec,
    Instance,
    Job,
    LoadBalancing,
    LossRecovery,
    ModelSpec,
    NetworkConfig,
    Placement,
    Plan,
    Precision,
    Recompute,
    TrafficClassConfig,
)
from scaleacross_opt.validation.plan_checks import check_plan

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "published_runs.csv"

# Public configs of models the CSV names without dimensions (ModelSpec fields; gated_mlp = SwiGLU).
_GPT = {"gated_mlp": False}
MODELS: dict[str, dict[str, object]] = {
    "LLAMA2-7B": {"layers": 32, "hidden_size": 4096, "ffn_hidden_size": 11008, "num_heads": 32, "num_kv_heads": 32,
                  "vocab_size": 32000},  # HF meta-llama/Llama-2-7b-hf
    "Llama 2 13B": {"layers": 40, "hidden_size": 5120, "ffn_hidden_size": 13824, "num_heads": 40, "num_kv_heads": 40,
                    "vocab_size": 32000},  # HF meta-llama/Llama-2-13b-hf
    "Llama 2 70B": {"layers": 80, "hidden_size": 8192, "ffn_hidden_size": 28672, "num_heads": 64, "num_kv_heads": 8,
                    "vocab_size": 32000},  # HF meta-llama/Llama-2-70b-hf
    # NeMo GPT-3 configs (conf/training/gpt3/{5b,20b,175b}.yaml): GeLU 4h MLP, vocab 50304 (padded GPT-2 BPE)
    "GPT3-5B": {"layers": 24, "hidden_size": 4096, "ffn_hidden_size": 16384, "num_heads": 32, "num_kv_heads": 32,
                "vocab_size": 50304, **_GPT},
    "GPT3-20B": {"layers": 44, "hidden_size": 6144, "ffn_hidden_size": 24576, "num_heads": 48, "num_kv_heads": 48,
                 "vocab_size": 50304, **_GPT},
    "GPT3-175B": {"layers": 96, "hidden_size": 12288, "ffn_hidden_size": 49152, "num_heads": 96, "num_kv_heads": 96,
                  "vocab_size": 50304, **_GPT},
    # Nemotron (squared-ReLU 4h MLP, 256k vocab): Nemotron-3 8B / Nemotron-4 340B reports; 22B per NeMo config
    # (NeMo-Framework-Launcher conf/training/nemotron/nemotron_22b.yaml and NeMo's Nemotron3Config22B:
    # num_query_groups null, i.e. multi-head attention, 48 KV heads)
    "Nemotron-8B": {"layers": 32, "hidden_size": 4096, "ffn_hidden_size": 16384, "num_heads": 32, "num_kv_heads": 32,
                    "vocab_size": 256000, **_GPT},
    "Nemotron-22B": {"layers": 40, "hidden_size": 6144, "ffn_hidden_size": 24576, "num_heads": 48, "num_kv_heads": 48,
                     "vocab_size": 256000, **_GPT},
    "Nemotron-340B": {"layers": 96, "hidden_size": 18432, "ffn_hidden_size": 73728, "num_heads": 96, "num_kv_heads": 8,
                      "vocab_size": 256000, **_GPT},
    # BigScience tr11-176B-ml README/slurm: 70 layers, h 14336, 112 heads, GeLU 4h, vocab padded to 250880,
    # tied embeddings
    "BLOOM 176B": {"layers": 70, "hidden_size": 14336, "ffn_hidden_size": 57344, "num_heads": 112, "num_kv_heads": 112,
                   "vocab_size": 250880, "tied_embeddings": True, **_GPT},
    # HF mistralai/Mixtral-8x7B-v0.1: 32 layers, h 4096, 32 heads / 8 KV, 8 experts top-2, expert FFN 14336, vocab 32000
    "Mixtral-8x7B": {"layers": 32, "hidden_size": 4096, "ffn_hidden_size": 14336, "num_heads": 32, "num_kv_heads": 8,
                     "vocab_size": 32000,
                     "moe": {"num_experts": 8, "top_k": 2, "expert_ffn_hidden_size": 14336}},
    # HF Qwen/Qwen3-30B-A3B: 48 layers, h 2048, 32 heads / 4 KV, head_dim 128, 128 experts top-8, moe_intermediate 768,
    # every layer MoE (decoder_sparse_step 1, mlp_only_layers []), no shared expert, vocab 151936, untied
    "Qwen3_30B_a3B": {"layers": 48, "hidden_size": 2048, "ffn_hidden_size": 6144, "num_heads": 32, "num_kv_heads": 4,
                      "head_dim": 128, "vocab_size": 151936,
                      "moe": {"num_experts": 128, "top_k": 8, "expert_ffn_hidden_size": 768}},
    # HF Qwen/Qwen3-235B-A22B: 94 layers, h 4096, 64 heads / 4 KV, head_dim 128, 128 experts top-8,
    # moe_intermediate 1536
    "Qwen3_235B_a22B": {"layers": 94, "hidden_size": 4096, "ffn_hidden_size": 12288, "num_heads": 64, "num_kv_heads": 4,
                        "head_dim": 128, "vocab_size": 151936,
                        "moe": {"num_experts": 128, "top_k": 8, "expert_ffn_hidden_size": 1536}},
    # HF openai/gpt-oss-120b: 36 layers, h 2880, 64 heads / 8 KV, head_dim 64, 128 experts top-4, expert FFN 2880,
    # vocab 201088; alternate layers use 128-token sliding-window attention (not representable: full causal here)
    "GPT OSS 120B": {"layers": 36, "hidden_size": 2880, "ffn_hidden_size": 2880, "num_heads": 64, "num_kv_heads": 8,
                     "head_dim": 64, "vocab_size": 201088,
                     "moe": {"num_experts": 128, "top_k": 4, "expert_ffn_hidden_size": 2880}},
}
# Models with a file in models/.
MODELS["LLAMA2-13B"] = MODELS["Llama 2 13B"]
MODELS["LLAMA2-70B"] = MODELS["Llama 2 70B"]
MODEL_FILES = {"DeepSeek-V3": "deepseek-v3", "DeepSeekV3": "deepseek-v3", "Mixtral-8x22B": "mixtral-8x22b"}
LLAMA3 = {"8B": "llama3-8b", "70B": "llama3-70b", "405B": "llama3-405b"}

# NeMo 24.07 performance rows with TP > 1: the launcher config each one's run script uses
# (NeMo-Framework-Launcher examples/training/<model>/h100/*_fp8*.sh → launcher_scripts/conf/training/...)
# sets ``ub_tp_comm_overlap`` (Transformer Engine userbuffers TP overlap) as follows.
NEMO_TP_COMM_OVERLAP = {
    "GPT3-20B": True,  # gpt3/20b.yaml (+ tuned tp_overlap/ub_cfg_h100_h6144_tp2_mbs2_seqlen2048.yaml)
    "GPT3-175B": True,  # gpt3/175b.yaml
    "LLAMA2-70B": False,  # llama/llama2_70b.yaml: ub_tp_comm_overlap false
    "Nemotron-8B": True,  # nemotron/nemotron_8b.yaml
    "Nemotron-22B": True,  # nemotron/nemotron_22b.yaml
    "Nemotron-340B": True,  # nemotron/nemotron_340b.yaml
    "LLAMA3-70B": True,  # llama/llama3_70b.yaml (llama3_70b_fp8.sh adds ub_cfg_h100_fp8_h8192_tp4_mbs1_seqlen8192)
    # NeMo 24.03.01 long-sequence LLAMA2-7B rows (TP 2..8): launcher llama/llama2_7b.yaml has ub_tp_comm_overlap false
    "LLAMA2-7B": False,
    # NeMo 2.0 recipe mixtral_8x22b.pretrain_recipe(performance_mode=True) adds MegatronCommOverlapCallback without
    # tp_comm_overlap, whose default is off (nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py)
    "Mixtral-8x22B": False,
}

# Megatron-Bridge performance rows with TP > 1: the recipe's CommOverlapConfig.
MBRIDGE_TP_COMM_OVERLAP = {
    # recipes/llama/llama31_405b.py: CommOverlapConfig(tp_comm_overlap=True, userbuffers_*_tp8_cp2...); the perf scripts
    # (scripts/performance/configs/llama/llama31_llm_pretrain.py) swap in the H100 tp8 / B200 tp4 userbuffers configs
    "LLAMA3.1_405B": True,
}

# Meta Grand Teton H100 96 GB HBM2e at 500 W (torchtitan benchmarks): H100 peaks, 96 GB (89.4 GiB).
H100_96GB = gpu_by_name("H100-SXM-80GB").model_copy(
    update={"name": "H100-SXM-96GB-500W", "hbm_gib": 89.4, "source": "torchtitan benchmark notes; H100 SXM peaks"}
)

# BLOOM's Jean Zay A100 nodes: 4 x 100 Gb/s Omni-Path per 8-GPU node = 50 Gb/s per GPU (bigscience tr11 README).
A100_JEAN_ZAY = gpu_by_name("A100-80GB").model_copy(
    update={"name": "A100-80GB-OPA", "nic_bandwidth_gbps": 50.0,
            "source": "A100 80GB peaks; Jean Zay: 4x100 Gb/s Omni-Path per 8-GPU node (bigscience tr11-176B-ml README)"}
)

IB = TrafficClassConfig(
    collective_algorithm=CollectiveAlgorithm.RING,
    load_balancing=LoadBalancing.PACKET_SPRAYING,
    congestion_control=CongestionControl.RECEIVER_DRIVEN,
    loss_recovery=LossRecovery.SELECTIVE_REPEAT,
    qps_per_connection=1,
    window_kib_per_qp=4096,
)
META_ROCE = IB.model_copy(update={"load_balancing": LoadBalancing.ECMP, "loss_recovery": LossRecovery.GO_BACK_N,
                                  "qps_per_connection": 16})

# Frameworks whose DP gradient sync starts after the last backward (see the module docstring).
AFTER_BACKWARD_SYNC = ("Megatron-LM", "Megatron-DeepSpeed")

# Why a row may legitimately be far off (printed beside rows off by more than 30 %).
REASONS = {
    "zero3": "ZeRO-3 at tiny per-GPU batch: per-layer gathers (prefetched one layer ahead) dominate; NCCL "
             "kernels competing with compute for SMs are not modelled",
    "fp8": "FP8 GEMM efficiency ratio (0.75 of FP8 peak-relative) is assumed, not calibrated",
    "h100_500w": "H100 capped at 500 W (lower clocks) not modelled; efficiency is the H200 calibration",
    "a100": "A100 efficiency assumed equal to the H200 calibration (no A100 measurement)",
    "long_cp": "long context (>= 32k): flash efficiency beyond the calibrated 32k and ring-attention (CP) overlap "
    "(torchtitan 2024, NeMo 24.03) not calibrated",
    "async_tp": "torchtitan AsyncTP modelled as TE-style GEMM-pipelined TP overlap (hides nearly all TP); the "
    "source measured +5.7 % from it (rows 201 -> 202)",
    "moe": "MoE: EP all-to-all charged fully exposed unless the schedule pairs micro-batches (DualPipe; elsewhere "
    "EP_OVERLAP_FRACTION 0: Megatron-Core's A2A/compute overlap and DeepEP not modelled); router, token "
    "permute/unpermute and grouped-GEMM efficiency of small experts are uncalibrated (moe.csv covers one expert "
    "shape family)",
    "blackwell": "B200/GB200 efficiency assumed equal to the H200 calibration (no Blackwell measurement); MXFP8 "
    "modelled as per-tensor FP8",
    "swa": "GPT-OSS: half the layers use 128-token sliding-window attention (+ attention sinks); modelled as full "
    "causal attention, which over-charges attention time",
    "mla": "DeepSeek-V3: the MTP module is not modelled; MLA's latent projections are priced as plain GEMMs "
    "(uncalibrated shapes)",
    "ep_fold": "an EP group spanning TP x DP ranks (Megatron-Core MoE parallel folding) is not representable: "
    "Plan.ep must divide dp*cp",
    "dualpipe": "DeepSeek-V3: DualPipe modelled in its DualPipeV form (one parameter copy); node-limited routing and "
    "IB/NVLink two-hop all-to-all not modelled; measurement is a whole-run GPU-hour average",
    "llama3_meta": "Llama 3: measurement converted with PaLM's 6N + 12LHQT (full, not causal-halved, attention; Meta "
    "does not restate its formula); all-gather CP with exposed K/V gather modelled as overlapped ring attention; V "
    "(interleave) not stated so v = 1",
    "omnipath": "Jean Zay Omni-Path fabric modelled as InfiniBand at 50 Gb/s per GPU",
    "token_drop": "NeMo Mixtral-8x22B recipe drops tokens (capacity factor): fewer expert FLOPs than top-k dropless",
}


@dataclass(frozen=True)
class Case:
    """One buildable row: the instance, the plan and the measurement in tokens/s per GPU."""

    row_id: str
    label: str
    instance: Instance
    plan: Plan
    measured_tps_gpu: float
    reasons: tuple[str, ...]


def _int(cell: str, default: int) -> int:
    return int(float(cell)) if cell.strip() else default


def _model(row: dict[str, str]) -> ModelSpec:
    name = row["model_name"]
    if name in MODELS:
        return ModelSpec(name=name, **MODELS[name])
    if name in MODEL_FILES:
        return ModelSpec(**yaml.safe_load((ROOT / "models" / f"{MODEL_FILES[name]}.yaml").read_text()))
    if row["layers"].strip():
        hidden = int(row["hidden"])
        return ModelSpec(
            name=name, layers=int(row["layers"]), hidden_size=hidden,
            ffn_hidden_size=_int(row["ffn_hidden"], 4 * hidden), num_heads=int(row["heads"]),
            num_kv_heads=_int(row["kv_heads"], int(row["heads"])), vocab_size=int(row["vocab"]), gated_mlp=False,
        )
    match = re.search(r"Llama 3(?:\.1)? (\d+B)|LLAMA3(?:\.1)?[-_](\d+B)", name)
    if match:
        file = ROOT / "models" / f"{LLAMA3[match.group(1) or match.group(2)]}.yaml"
        return ModelSpec(**yaml.safe_load(file.read_text()))
    raise KeyError(f"no dimensions known for {name!r}")


def _param_count(model: ModelSpec) -> float:
    """All parameters of a dense model (PaLM's N): attention, MLP, embedding and LM head."""
    h, d = model.hidden_size, model.head_dim_resolved
    attention = 2 * h * model.num_heads * d + 2 * h * model.num_kv_heads * d
    mlp = (3 if model.gated_mlp else 2) * h * model.ffn_hidden_size
    return model.layers * (attention + mlp) + model.vocab_size * h * (1 if model.tied_embeddings else 2)


def _gpu(cell: str) -> GpuSpec:
    if "Jean Zay" in cell:
        return A100_JEAN_ZAY
    if cell.startswith("A100-80GB"):
        return gpu_by_name("A100-80GB")
    if cell.startswith("H100 SXM 96GB"):
        return H100_96GB
    if cell.startswith("H100-80GB"):
        return gpu_by_name("H100-SXM-80GB")
    if cell.startswith("H800"):
        return gpu_by_name("H800")
    if cell.startswith("GB200"):
        return gpu_by_name("GB200-NVL72")
    if cell.startswith("B200"):
        return gpu_by_name("B200")
    raise KeyError(f"unknown GPU {cell!r}")


def _recompute(cell: str, framework: str) -> Recompute:
    cell = cell.lower()
    if cell.startswith("full") or ("torchtitan" in framework and cell.startswith("selective")):
        return Recompute.FULL
    if cell.startswith("selective") or "up-projection" in cell:
        return Recompute.SELECTIVE
    return Recompute.NONE


def _flops_per_token(row: dict[str, str], model: ModelSpec, s: int) -> float:
    """FLOPs per token of the source's own TFLOP/s or MFU figure (see the module docstring)."""
    h, layers, vocab = model.hidden_size, model.layers, model.vocab_size
    source = row["source"]
    if source.startswith("Llama 3 Herd"):  # PaLM (Chowdhery et al.) MFU: 6N + 12·L·H·Q·T
        return 6 * _param_count(model) + 12 * layers * model.num_heads * model.head_dim_resolved * s
    if source.startswith("NVIDIA NeMo long-sequence"):  # NeMo 24.03 llama2 formula (attention not causal-halved)
        return layers * h * h * (12 + 12 * model.num_kv_heads / model.num_heads + 18 * model.ffn_hidden_size / h
                                 + 12 * s / h + 6 * 32000 / (layers * h))  # vocab: LLM_VOCAB_SIZE_MAP["llama2"]
    if row["measured_metric"] == "tflops_per_gpu":  # Narayanan et al. 2021 Eq. 3 (counts the recompute forward)
        return 96 * layers * h * h * (1 + s / (6 * h) + vocab / (16 * layers * h))
    return 72 * layers * h * h * (1 + s / (6 * h) + vocab / (12 * layers * h))  # Korthikanti et al. 2022 MFU


def _measured(row: dict[str, str], model: ModelSpec, seq: int, num_gpus: int, gbs: int) -> float:
    """Tokens/s per GPU from the row's own metric, converted with its source's FLOP formula."""
    value = float(row["measured_value"])
    metric = row["measured_metric"]
    if metric == "tokens_per_s_per_gpu":
        return value
    if metric == "step_time_s":
        return gbs * seq / (value * num_gpus)
    if metric == "tflops_per_gpu":
        return value * 1e12 / _flops_per_token(row, model, seq)
    if metric == "mfu":
        return value * 312e12 / _flops_per_token(row, model, seq)
    raise ValueError(f"unknown metric {metric}")


def _zero_stage(framework: str, notes: str) -> int:
    """ZeRO stage of a framework as the run used it (see the module docstring)."""
    if framework.startswith("Megatron-Bridge"):
        return 3 if "FSDP=1" in notes else 1
    if framework.startswith("Meta Llama 3"):
        return 2
    if framework == "Megatron-DeepSpeed" or framework.startswith("HAI-LLM") or "NeMo" in framework:
        return 1
    if "DeepSpeed" in framework or "torchtitan" in framework:
        return 3
    return 0


def _tp_comm_overlap(row: dict[str, str], tp: int) -> bool:
    if tp == 1:
        return False
    framework = row["framework"]
    if framework == "NeMo":
        return NEMO_TP_COMM_OVERLAP[row["model_name"]]
    if framework == "Megatron-Bridge":
        return MBRIDGE_TP_COMM_OVERLAP[row["model_name"]]
    return "AsyncTP" in row["notes"]


def build_case(row: dict[str, str]) -> Case:
    """Instance, plan and measurement of one CSV row (KeyError/ValueError: cannot be built)."""
    if not row["tp"].strip() or not row["pp"].strip():
        raise ValueError("parallel layout (tp, pp) not stated")
    model = _model(row)
    gpu = _gpu(row["gpu_type"])
    framework, notes = row["framework"], row["notes"]
    n = int(row["num_gpus"])
    tp, pp, cp, ep = int(row["tp"]), int(row["pp"]), _int(row["cp"], 1), _int(row["ep"], 1)
    dp = _int(row["dp"], n // (tp * pp * cp))
    if tp * pp * cp * dp != n:  # a printed DP that contradicts the GPU count (Llama 3 Table 4, CP16 row)
        dp = n // (tp * pp * cp)
    if ep > 1 and (dp * cp) % ep:
        raise ValueError(f"ep={ep} does not divide dp*cp={dp * cp}: {REASONS['ep_fold']}")
    dualpipe = framework.startswith("HAI-LLM")
    v = 2 if dualpipe else _int(row["virtual_stages"], 1)
    seq = _int(row["seq_len"], 8192)
    gbs = _int(row["global_batch_seqs"], 2240 if model.layers == 105 else 0)
    if gbs == 0:
        raise ValueError("global batch not stated")
    local = re.search(r"local batch size (\d+)", notes)
    if "torchtitan" in framework and local:
        mb = max(1, int(local.group(1)) // (pp if pp > 1 else 1))
    else:
        mb = _int(row["micro_batch"], 1)
    fp8 = "FP8" in row["precision"].upper() or "FLOAT8" in row["precision"].upper()
    zero = _zero_stage(framework, notes)
    building = Building(name="dc", gpu=gpu, num_gpus=n)
    job = Job(model=model, seq_len=seq, global_batch_size=gbs, precision=Precision.FP8 if fp8 else Precision.BF16)
    instance = Instance(name=f"row{row['row_id']}", cluster=Cluster(buildings=[building]), job=job)
    config = META_ROCE if gpu is H100_96GB or "RoCE" in row["gpu_type"] else IB
    schedule = "dualpipe" if dualpipe else ("interleaved-1f1b" if v > 1 else "1f1b")
    plan = Plan(
        tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, virtual_stages=v, micro_batch_size=mb, schedule=schedule,
        recompute=_recompute(row["recompute"], framework), zero_stage=zero,
        dp_sync=DpSync.AFTER_BACKWARD if framework in AFTER_BACKWARD_SYNC else DpSync.OVERLAP_BACKWARD,
        tp_comm_overlap=_tp_comm_overlap(row, tp),
        placement=Placement(
            cross_building=CrossBuilding.NONE, buildings=[BuildingShare(building="dc", dp_replicas=dp, pp_stages=pp)],
            layers_per_stage=even_layers(model.layers, pp),
        ),
        network=NetworkConfig(intra_building=config, cross_building=config),
    )
    problems = check_plan(plan, instance)
    if problems:
        raise ValueError("; ".join(f"{field}: {why}" for field, why in problems))
    reasons = tuple(
        key for key, hit in (
            ("zero3", zero == 3 and ("DeepSpeed" in framework or "Megatron-Bridge" in framework)), ("fp8", fp8),
            ("h100_500w", gpu is H100_96GB), ("a100", gpu.name.startswith("A100")), ("long_cp", seq >= 32768),
            ("async_tp", "torchtitan" in framework and plan.tp_comm_overlap), ("moe", model.moe is not None),
            ("blackwell", gpu.name in ("B200", "GB200-NVL72")), ("swa", row["model_name"] == "GPT OSS 120B"),
            ("mla", model.name == "deepseek-v3"), ("dualpipe", dualpipe),
            ("llama3_meta", framework.startswith("Meta Llama 3")), ("omnipath", gpu is A100_JEAN_ZAY),
            ("token_drop", framework == "NeMo" and row["model_name"] == "Mixtral-8x22B"),
        ) if hit
    )
    measured = _measured(row, model, seq, n, gbs)
    label = f"{row['model_name']} {gpu.name} n={n} t{tp}p{pp}d{dp}c{cp}e{ep}v{v} mb{mb}"
    return Case(row["row_id"], label, instance, plan, measured, reasons)


def load_cases(path: Path = DATA) -> tuple[list[Case], list[tuple[str, str]]]:
    """Buildable cases and (row_id, why) of skipped rows."""
    cases, skipped = [], []
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            try:
                cases.append(build_case(row))
            except (KeyError, ValueError) as err:
                skipped.append((row["row_id"], str(err)))
    return cases, skipped


def case_memory(case: Case) -> MemoryBreakdown:
    """Memory per GPU predicted for a case."""
    return memory_per_gpu(case.instance, case.plan)


def main() -> int:
    cases, skipped = load_cases()
    errors = []
    print(f"{'row':>4} {'run':<58} {'pred':>9} {'meas':>9} {'err%':>7} {'GiB':>6} fit  reason")
    for case in cases:
        report = estimate(case.instance, case.plan)
        predicted = report.tokens_per_s / case.plan.num_gpus
        error = 100 * (predicted - case.measured_tps_gpu) / case.measured_tps_gpu
        errors.append(abs(error))
        why = "; ".join(REASONS[r] for r in case.reasons) if abs(error) > 30 else ""
        fit = "yes" if report.fits_memory else "NO"
        print(
            f"{case.row_id:>4} {case.label[:58]:<58} {predicted:9.1f} {case.measured_tps_gpu:9.1f} {error:+7.1f} "
            f"{report.memory_gib_per_gpu:6.1f} {fit:<4} {why}"
        )
    for row_id, why in skipped:
        print(f"{row_id:>4} skipped: {why}")
    over = sum(e > 30 for e in errors)
    print(f"rows: {len(cases)} predicted, {len(skipped)} skipped, {over} off by more than 30 %")
    print(f"median absolute error on throughput: {statistics.median(errors):.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
