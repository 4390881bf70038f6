"""Upper (and lower) bounds of every numeric input field, and why (issue 12).

The schemas use these in ``Field(ge=, le=, gt=, lt=)`` so the bounds appear in the exported JSON
Schema (``scaleacross-opt schema instance``). They are deliberately generous: each is one to three
orders of magnitude above any published training run or shipping hardware, so a real instance never
meets them, while a typo or a fuzzed value (``seq_len: 10**32``) is rejected at load time instead of
exhausting memory in ``solve`` or overflowing OR-Tools' 64-bit integer coefficients.
The README's "Input bounds" table mirrors this module.
"""

from __future__ import annotations

# --- job -------------------------------------------------------------------------------------------
MAX_SEQ_LEN = 1 << 20  # 1,048,576 tokens: ~8× the longest pre-training context (128K), = long-context SFT
MAX_GLOBAL_BATCH_SIZE = 1 << 24  # 16.8M sequences: ~4,000× Llama 3's 4,096 (the largest published)
MAX_GPUS = 1 << 24  # 16.8M GPUs per building / job: ~100× today's largest clusters

# Cross-field rule (validation.instance_checks): tokens of one step per job GPU. Llama 3 405B trains
# 1,024 tokens per GPU per step (16M tokens on 16,384 GPUs), small clusters ~10^5; at 2^27 (134M) a
# step of even a 1B-parameter model is ~10^18 FLOP per GPU, i.e. >10 minutes per step at 1 PFLOP/s.
MAX_TOKENS_PER_GPU = 1 << 27
# Sequences (micro-batch samples) of one step per job GPU: a pipeline schedule materialises up to
# global_batch_size / dp micro-batches per stage, so this bounds the schedule's size. Shipped
# instances use 1 to 8; 4,096 is ~500× that (measured: 2^16 per GPU on 16 GPUs solves in 0.8 GB).
MAX_SEQUENCES_PER_GPU = 1 << 12

# --- cluster ---------------------------------------------------------------------------------------
MAX_GPUS_PER_NODE = 1 << 10  # 1,024: a whole NVL576-class rack as one "node" fits with room to spare
MAX_FABRIC_OVERSUBSCRIPTION = 1024.0  # 1:1024: beyond any deployed Clos taper (1:1 .. 1:16 in practice)
# Lower bounds of rates and latencies: far below any real network, far above floating-point underflow (a
# subnormal latency or bandwidth turned into seconds underflows to 0 and divides by zero).
MIN_BANDWIDTH_GBPS = 1e-3  # 1 Mb/s
MIN_LATENCY_US = 1e-3  # 1 ns
MAX_BANDWIDTH_GBPS = 1e9  # 1 Eb/s per direction: ~1,000× a 2.5M-GPU building's aggregate at 400 Gb/s each
MAX_LATENCY_US = 1e8  # 100 s one-way: ~1,000× the Earth–Moon round trip; real WAN latency is < 300 ms

# --- GPU -------------------------------------------------------------------------------------------
MAX_TFLOPS = 1e6  # 1 EFLOP/s per GPU: ~200× a B200's dense FP8 peak (4.5 PFLOP/s)
MAX_HBM_GIB = float(1 << 20)  # 1 PiB per GPU: ~5,000× a B200 (192 GB)
MAX_GB_PER_S = 1e7  # 10 PB/s: ~1,000× HBM3e (8 TB/s) and NVLink 5 (900 GB/s per direction)
MAX_NIC_GBPS = 1e7  # 10 Pb/s per GPU: ~10,000× an 800 Gb/s NIC
MAX_NVLINK_DOMAIN = 1 << 16  # 65,536 GPUs per scale-up domain: ~100× NVL576

# --- model -----------------------------------------------------------------------------------------
MAX_LAYERS = 1 << 10  # 1,024: ~8× the deepest published LLMs (Llama 3 405B: 126)
MAX_WIDTH = 1 << 20  # hidden / FFN / head sizes, 1,048,576: ~20× the widest published FFN (53,248)
MAX_HEADS = 1 << 14  # 16,384 heads: ~128× the most published (128)
MAX_VOCAB = 1 << 24  # 16.8M tokens: ~64× the largest published vocabularies (256K)
MAX_EXPERTS = 1 << 16  # 65,536 routed or shared experts: ~256× DeepSeek-V3's 256
MAX_TOP_K = 1 << 10  # 1,024 experts per token: ~128× DeepSeek-V3's top-8

# --- plan and search space -------------------------------------------------------------------------
MAX_DEGREE = MAX_GPUS  # a parallel degree or micro-batch size cannot exceed the GPUs / sequences bound
MAX_MICRO_BATCH_SIZE = MAX_GLOBAL_BATCH_SIZE
MAX_VIRTUAL_STAGES = MAX_LAYERS  # each model chunk holds at least one layer
MAX_BUILDING_GROUP = MAX_GPUS  # pipeline-group index in a pp+dp placement
MAX_BUCKET_PARAMS = 1 << 40  # 1.1T parameters per gradient bucket: a whole 1T-parameter model in one bucket
MAX_BUCKET_FACTOR = 1 << 20  # 2^20 × the 40M default: beyond MAX_BUCKET_PARAMS
MAX_TIME_LIMIT_S = 1e6  # 11.6 days per solve or search: every timer and deadline stays finite
MAX_QPS = 256  # queue pairs per connection (RDMA NICs offer a few hundred per flow set)
MAX_WINDOW_KIB = 1 << 20  # 1 GiB outstanding per QP: > bandwidth × RTT of 1 Tb/s over 8 ms

# Why each upper bound, by field name: appended to the load error so a rejected value explains itself.
WHY: dict[str, str] = {
    "seq_len": "2^20 tokens, ~8× the longest pre-training context",
    "global_batch_size": "2^24 sequences, ~4,000× the largest published batch",
    "num_gpus": "2^24 GPUs, ~100× today's largest clusters",
    "gpus_per_node": "a rack-scale NVL576 node fits with room to spare",
    "fabric_oversubscription": "1:1024, beyond any deployed fabric taper",
    "fabric_latency_us": "100 s, ~1,000× any real network latency",
    "latency_us": "100 s, ~1,000× any real network latency",
    "bandwidth_gbps": "1 Eb/s, ~1,000× a 2.5M-GPU building's aggregate",
    "peak_bf16_tflops": "1 EFLOP/s, ~200× a B200",
    "peak_fp8_tflops": "1 EFLOP/s, ~200× a B200",
    "hbm_gib": "1 PiB, ~5,000× a B200",
    "hbm_bandwidth_gb_per_s": "10 PB/s, ~1,000× HBM3e",
    "nvlink_bandwidth_gb_per_s": "10 PB/s, ~10,000× NVLink 5",
    "nic_bandwidth_gbps": "10 Pb/s, ~10,000× an 800 Gb/s NIC",
    "nvlink_domain_size": "2^16 GPUs, ~100× NVL576",
    "layers": "~8× the deepest published LLM",
    "first_dense_layers": "at most the layer bound",
    "layers_per_stage": "at most the layer bound",
    "hidden_size": "2^20, ~20× the widest published model",
    "ffn_hidden_size": "2^20, ~20× the widest published model",
    "expert_ffn_hidden_size": "2^20, ~20× the widest published model",
    "head_dim": "2^20, at most the width bound",
    "num_heads": "2^14, ~128× the most heads published",
    "num_kv_heads": "2^14, ~128× the most heads published",
    "vocab_size": "2^24, ~64× the largest published vocabulary",
    "num_experts": "2^16, ~256× DeepSeek-V3",
    "num_shared_experts": "2^16, ~256× DeepSeek-V3",
    "top_k": "~128× DeepSeek-V3's top-8",
    "virtual_stages": "each model chunk holds at least one layer",
    "tp": "2^24, at most the GPU bound",
    "cp": "2^24, at most the GPU bound",
    "pp": "2^24, at most the GPU bound",
    "dp": "2^24, at most the GPU bound",
    "ep": "2^24, at most the GPU bound",
    "tp_degrees": "2^24, at most the GPU bound",
    "cp_degrees": "2^24, at most the GPU bound",
    "pp_degrees": "2^24, at most the GPU bound",
    "ep_degrees": "2^24, at most the GPU bound",
    "dp_replicas": "2^24, at most the GPU bound",
    "pp_stages": "2^24, at most the GPU bound",
    "group": "2^24, at most the GPU bound",
    "micro_batch_size": "at most the global batch bound",
    "micro_batch_sizes": "at most the global batch bound",
    "qps_per_connection": "queue pairs a NIC offers per connection",
    "window_kib_per_qp": "1 GiB, above bandwidth × RTT of 1 Tb/s over 8 ms",
    "dp_bucket_params": "2^40, a whole 1T-parameter model in one bucket",
    "dp_bucket_factors": "2^20 × the default bucket, beyond a whole 1T-parameter model",
    "zero_stages": "ZeRO stages are 0..3",
    "zero_stage": "ZeRO stages are 0..3",
    "loss_rate": "a probability below 1",
}


def check_time_limit(time_limit_s: float) -> None:
    """ValueError unless ``time_limit_s`` is a number of seconds in (0, MAX_TIME_LIMIT_S] (not nan or inf)."""
    if not 0 < time_limit_s <= MAX_TIME_LIMIT_S:
        raise ValueError(f"time_limit_s must be a number of seconds in (0, {MAX_TIME_LIMIT_S:g}], got {time_limit_s!r}")
