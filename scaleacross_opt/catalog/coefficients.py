"""Coefficients of the cost model that are not derived from first principles, each with its source.

Units are in the names (``_S`` seconds, ``_US`` microseconds, ``_BYTES``, ``_GIB``). Values fitted on
the H200 calibration files (``../shared/calibration/h200/``, copied to ``tests/data/calibration/h200/``)
are re-checked by ``tests/test_cost_compute.py``; refit them with the same method if the model changes.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------------------------------
# Compute efficiency (cost.compute)
# ---------------------------------------------------------------------------------------------------

# A matmul of F FLOPs takes F / (peak × GEMM_EFFICIENCY) + GEMM_KERNEL_OVERHEAD_S. The overhead (launch,
# wave quantisation, prologue/epilogue) is what makes small per-GPU shards less efficient.
# Fitted to shared/calibration/h200/layer.csv by least squares on log(fwd+bwd time) over all 24 rows,
# jointly with ELEMENTWISE_PASSES below and with the attention coefficients held fixed
# (max |error| 5.2 % per row). Cross-check on gemm.csv: median |error| 8.6 % (the isolated 1024-sized
# GEMMs there are up to 35 % slower than this form predicts; they do not occur in LLM layers).
GEMM_EFFICIENCY = 0.6431
GEMM_KERNEL_OVERHEAD_S = 22.85e-6
# A grouped expert GEMM (one kernel over E local experts) costs this much extra per additional expert.
# Fitted to shared/calibration/h200/moe.csv (12 rows, least squares on log fwd+bwd time, GEMM
# coefficients above held fixed): max |error| 19 %, median 5 %.
GROUPED_GEMM_PER_EXPERT_S = 10.9e-6

# Flash attention: time = hardware FLOPs / (peak × ATTENTION_EFFICIENCY) + ATTENTION_OVERHEAD_S for
# forward + backward, split between forward and backward in proportion to their hardware FLOPs.
# Fitted to shared/calibration/h200/attention.csv (fwdbwd_s, 20 rows, least squares on log time;
# max |error| 16 %, median 3.5 %).
ATTENTION_EFFICIENCY = 0.5620
ATTENTION_OVERHEAD_S = 364.6e-6
# FlashAttention-2 backward recomputes QK^T: its backward does 2.5× the forward matmul FLOPs
# (Dao 2023, "FlashAttention-2", §3.1 / FLOP accounting of its benchmarks).
FLASH_BWD_FLOPS_RATIO = 2.5

# Memory-bound element-wise work per layer (norms, residual adds, rotary, SwiGLU/GeLU, casts), in
# full passes over the layer's [tokens × hidden] bf16 activation per forward; backward does twice as
# many. Fitted to shared/calibration/h200/layer.csv jointly with GEMM_EFFICIENCY (see above).
ELEMENTWISE_PASSES = 3.49

# Per-GPU multiplier of GEMM/attention efficiency relative to the H200 calibration. GPUs without a
# measurement use DEFAULT_GPU_EFFICIENCY_FACTOR (same achieved fraction of peak as the H200): an
# assumption, not a fit — the published runs are compared against it, not used to tune it.
GPU_EFFICIENCY_FACTOR: dict[str, float] = {
    "H200-SXM-141GB": 1.0,  # the calibration GPU itself
}
DEFAULT_GPU_EFFICIENCY_FACTOR = 1.0

# FP8 linear layers: the GEMM runs against the FP8 peak at this fraction of the BF16 efficiency.
# Transformer Engine's "GEMM Speedups Across Precisions" (nvidia.github.io/TransformerEngine, 5B model)
# reports FP8 autocast GEMM speed-ups of 1.41x (current scaling) to 1.61x (delayed scaling) over BF16,
# i.e. ~1.5x where the peak ratio is 2x: 1.5 / 2 = 0.75. Attention stays in BF16.
FP8_GEMM_EFFICIENCY_RATIO = 0.75
# FP8 jobs keep the output layer (LM head) in BF16: Megatron-Core's GPTModel.output_layer is a plain
# tensor_parallel.ColumnParallelLinear outside Transformer Engine's fp8_autocast (which wraps the
# TransformerBlock), torchtitan's Float8 converter skips it (module_filter_fn fqn != "output",
# torchtitan/float8.py), and DeepSeek-V3 (arXiv 2412.19437 §3.3.1) keeps "the output head" in BF16/FP32.
FP8_OUTPUT_LAYER = False

# ---------------------------------------------------------------------------------------------------
# Memory (cost.memory)
# ---------------------------------------------------------------------------------------------------

# Mixed-precision Adam bytes per parameter (Rajbhandari et al. 2020, ZeRO, §3.1): bf16 weights 2,
# bf16 gradients 2, fp32 master weights + momentum + variance 12.
WEIGHT_BYTES = 2
GRAD_BYTES = 2
OPTIMIZER_BYTES = 12
# Gradients are reduced across data parallelism in bf16: Megatron-Core's DistributedDataParallelConfig
# default grad_reduce_in_fp32=False (torchtitan's FSDP default reduces in fp32: 4 would apply there).
GRAD_REDUCE_BYTES = 2
# Every framework in the published runs uses FlashAttention / SDPA (or full recompute), which never
# stores the s×s attention scores: the 5·a·s/h term of Korthikanti et al. 2022 is dropped unless False.
FLASH_ATTENTION = True
# Allowance for CUDA context, NCCL buffers, cuBLAS workspace and allocator fragmentation:
# a fixed part plus a fraction of the activations. Only activations are allocated tensor by tensor
# through PyTorch's caching allocator, which reserves ~5–10 % above what is allocated (PyTorch CUDA
# memory-management notes); weights, grads and optimizer states live in contiguous buffers
# (Megatron-Core grad/param buffers, FSDP2 flat shards). The CUDA context + NCCL channels take
# ~1–2 GiB per GPU (NCCL docs: NCCL_BUFFSIZE 4 MiB × channels × peers).
MEMORY_FIXED_OVERHEAD_GIB = 2.0
MEMORY_FRAGMENTATION_FRACTION = 0.05
# ZeRO-3 keeps the gathered weights of the current and the prefetched layer (DeepSpeed default
# prefetch of one layer; FSDP2 likewise).
ZERO3_GATHERED_LAYERS = 2
# Logits kept for the loss on the last stage: bf16 logits + fp32 softmax per token and vocab entry.
LOGITS_BYTES_PER_ELEMENT = 6

# ---------------------------------------------------------------------------------------------------
# Optimizer step (cost.step)
# ---------------------------------------------------------------------------------------------------

# Adam touches per parameter it owns: read+write fp32 master, m, v (24 B), read fp32 grad (4 B),
# write bf16 weight (2 B): memory-bound at HBM bandwidth × this efficiency
# (shared/calibration/h200/memcpy.csv: 4.27 TB/s of 4.8 TB/s peak = 0.89).
ADAM_BYTES_PER_PARAM = 30
HBM_EFFICIENCY = 0.89

# ---------------------------------------------------------------------------------------------------
# Communication overlap (cost.step)
# ---------------------------------------------------------------------------------------------------

# Fraction of TP (sequence-parallel) collectives hidden behind compute when the plan does not overlap
# them (Plan.tp_comm_overlap False). Megatron-LM 2021/2022 and default torchtitan do not overlap them
# (Korthikanti et al. 2022 §4.2.2 report them as exposed).
TP_OVERLAP_FRACTION = 0.0
# With Plan.tp_comm_overlap (Transformer Engine userbuffers, NeMo/Megatron-Core ``tp_comm_overlap``),
# each TP all-gather / reduce-scatter is pipelined with the GEMM it feeds or follows; a forward
# reduce-scatter is split into this many chunks, of which the last stays exposed (NeMo docs,
# "Communication Overlap": "pipeline-overlap using chunks of reduce-scatter, which exposes one
# reduce-scatter chunk"; NeMo's H100 userbuffers configs use PipelineOverlapCfg(num_splits=4) for
# proj_fprop / fc2_fprop, nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py).
TP_OVERLAP_RS_SPLITS = 4
# Fraction of EP all-to-all hidden behind compute without a dedicated overlapping schedule.
EP_OVERLAP_FRACTION = 0.0
# Gradient buckets (cost.step.dp_buckets): with the sync overlapping the backward, a chunk's gradients are
# reduced in buckets of at most max(DP_BUCKET_MIN_PARAMS, DP_BUCKET_PARAMS_PER_RANK × dp·cp) of its
# parameters, each bucket as soon as the backward produced it — Megatron-Core's default
# (DistributedDataParallelConfig.bucket_size: "max(40000000, 1000000 * dp_size) parameters (larger DP sizes
# need larger buckets to ensure collectives do not become latency-bound)"); only a stage's first model chunk
# is bucketed, the later chunks sync as one bucket each (megatron/training/training.py get_model:
# disable_bucketing=(model_chunk_idx > 0)). ZeRO-3 reduce-scatters each layer's gradients on their own
# (FSDP wraps each transformer block: one reduce-scatter per block). How much of the sync hides behind the
# backward then follows from the timeline (Li et al. VLDB'20, PyTorch DDP §3.2.3: all but the last bucket).
DP_BUCKET_MIN_PARAMS = 40_000_000
DP_BUCKET_PARAMS_PER_RANK = 1_000_000

# ---------------------------------------------------------------------------------------------------
# Network (cost.network, cost.collectives)
# ---------------------------------------------------------------------------------------------------

# One-way latency across a building's fabric when Building.fabric_latency_us is None: half of the
# 22 µs idle RTT measured on Meta's RoCE training fabric (Gangidi et al., SIGCOMM'24).
DEFAULT_FABRIC_LATENCY_US = 11.0
# Achieved fraction of NVLink line rate for NCCL collectives over NVLink (ring / all-gather /
# reduce-scatter bus bandwidth): NCCL's protocol overhead is ~20 % — 370 GB/s busbw of the 450 GB/s
# H100 line rate (NCCL maintainer, NVIDIA/nccl-tests#212); 8×A100 measure ~200–220 GB/s of 300
# (NVIDIA/nccl-tests#149, #228), consistent with or slightly below it.
NVLINK_PROTOCOL_EFFICIENCY = 0.8
# Per-hop latency inside an NVLink domain (NVSwitch + NCCL protocol step), µs; NCCL's LL protocol
# step latency on NVLink is a few µs (NCCL tuning model, src/graph/tuning.cc base latencies).
NVLINK_LATENCY_US = 3.0
# NVLink SHARP (NVLS) all-reduce inside an NVSwitch domain (cost.collectives.nvls_all_reduce_s): the
# switch's in-network reduction reaches this fraction of the link's NCCL rate (NVLINK_PROTOCOL_EFFICIENCY
# × line rate, NCCL's bwIntra); NCCL's own tuning model, src/tuning/nvls.cc nvlsEfficiency: Hopper 0.85,
# Blackwell 0.74. GPUs absent here have no NVLS (Ampere's NVSwitch has no SHARP).
NVLS_EFFICIENCY = {"H100-SXM-80GB": 0.85, "H800": 0.85, "H200-SXM-141GB": 0.85, "B200": 0.74, "GB200-NVL72": 0.74}
# Latency of one NVLS collective on NVLink, µs: NCCL's tuning model, src/graph/tuning.cc
# hwLat[NVLINK][NVLS][SIMPLE] = 25.
NVLS_LATENCY_US = 25.0
# Equal-cost paths a flow can hash onto: inside a building, a leaf's uplinks (Gangidi et al.: ECMP
# imbalance > 1.2 across 16 links); across buildings, the links of a bundle (same order; assumption).
INTRA_BUILDING_PATHS = 16
CROSS_BUILDING_PATHS = 16
# Packet spraying leaves a small imbalance from per-packet queueing (Gangidi et al. 2024 §5 ideal
# case; Dixit et al., INFOCOM'13 "random packet spraying" reach ~99 % of ideal): 0.98.
SPRAYING_EFFICIENCY = 0.98
# Fraction of sprayed packets that arrive out of order; a go-back-N receiver discards them as lost
# (Gangidi et al. 2024 §5: RoCE NICs' go-back-N is why Meta does not spray). Order-of-magnitude
# assumption (paths differ by queueing of a few packets), chosen to make the penalty visible.
SPRAYING_REORDER_FRACTION = 0.01
# DCQCN's rate recovery is timer-driven; its feedback lags by one RTT, so its link utilisation falls
# with RTT: efficiency = 1 / (1 + RTT / DCQCN_HALF_EFFICIENCY_RTT_US). Zhu et al. (CoNEXT'16, "ECN or
# Delay") show DCQCN stable for feedback delays of tens to ~100 µs and oscillating beyond; a 2 ms RTT
# for halving keeps intra-building (~22 µs) near 99 % (Meta's measured behaviour) — an assumption.
DCQCN_HALF_EFFICIENCY_RTT_US = 2000.0
# Receiver-driven admission (credits/grants) keeps queues short at any RTT; its cost is the grant
# overhead, ~2 % (Gangidi et al. 2024 §6: near line rate after disabling DCQCN). Flat in RTT.
RECEIVER_DRIVEN_EFFICIENCY = 0.98
# RoCE MTU (payload bytes per packet) used to turn windows into packets for go-back-N.
MTU_BYTES = 4096
